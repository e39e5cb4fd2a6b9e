#!/bin/bash
# The GPU run of docs/tuning.md, one command on the H100 (via the device `run` tool):
# build, record the 4 graphs' tuning spaces, tune live, check reuse in a new process,
# run the CUDA tests. Everything it makes goes under $OUT (at most 8 files).
# Usage: [SKIP_TESTS=1] bash benchmarks/tune_h100.sh [skip-build]
set -o pipefail
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16
export RLFLOW_CONV_ALGO_CACHE=/tmp/rlflow_conv_algos.tsv RLFLOW_TUNED_PLANS=/tmp/rlflow_tuned_plans.json
OUT=${OUT:-/tmp/tune_out}; mkdir -p "$OUT"
LOG=$OUT/log.txt
start=$(date +%s); left() { echo $(( 570 - ($(date +%s) - start) )); }
say() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
if [ "$1" != skip-build ]; then
  RLFLOW_CMAKE_ARGS="-DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++" \
    pip install --no-build-isolation --no-deps -e . > /tmp/build.log 2>&1 || { tail -60 /tmp/build.log | tee -a "$LOG"; exit 1; }
fi
say "built"; python -c "from taso_env.gpu import cuda_backend as cb; print(cb.available(), cb.device_info())" 2>&1 | tee -a "$LOG"
timeout $(( $(left) - 200 )) python scripts/tune.py -m record -c configs/tune_h100.json 2>&1 | grep -v "it/s\]$" | tee -a "$LOG"
say "recorded"; ls -la data/tuning | tee -a "$LOG"; cp data/tuning/*.h5 "$OUT"/ 2>/dev/null
for g in bert_base mobilenet_v2 inception_v3 resnet50; do
  [ "$(left)" -lt 110 ] && break
  timeout $(( $(left) - 90 )) python scripts/tune.py -m tune -c configs/tune_h100.json --graphs $g 2>&1 | grep -v "it/s\]$" | tail -3 | tee -a "$LOG"
done
say "tuned"; cp /tmp/rlflow_tuned_plans.json "$OUT"/ 2>/dev/null
for g in bert_base mobilenet_v2 inception_v3 resnet50; do
  [ "$(left)" -lt 60 ] && break
  timeout $(( $(left) - 40 )) python -c "
import json, sys
from taso_env.tuning import config, driver
cfg, _ = config.load('configs/tune_h100.json')
print(json.dumps({'reuse': sys.argv[1], **driver.check_reuse(cfg, sys.argv[1])}))" $g 2>&1 | tail -2 | tee -a "$LOG"
done
say "reuse checked"
[ -z "$SKIP_TESTS" ] && [ "$(left)" -gt 30 ] && timeout $(( $(left) - 15 )) python -m pytest -q -x -p no:cacheprovider tests/test_cuda.py tests/test_cuda_fusion.py 2>&1 | tail -15 | tee -a "$LOG"
say "done"
tar czf "$OUT/extras.tar.gz" runs/tune_h100 /tmp/build.log taso_env/_core*.so taso_env/_cuda*.so 2>/dev/null
ls -la "$OUT"

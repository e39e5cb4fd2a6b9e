#!/bin/bash
# One device call on the H100 (the `run` tool): build the CUDA backend, run the CUDA
# tests, time rlflow beside PyTorch on the zoo (bench_vs_pytorch.py, one process per
# model), and measure end to end the graphs an evaluation wrote (original beside
# optimised, for the measured-vs-estimated speedup of the learned agents and search).
# Usage: bash benchmarks/h100_check.sh [EVAL_GRAPHS_DIR] (models via MODELS="...", math
# modes via MATH="fp32 tf32 fp16 bf16").
# The GPU machine has no network: carry a Cython wheel in .whl/ (it builds _core).
set -o pipefail
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/h100_check}; mkdir -p "$OUT"; LOG=$OUT/log.txt
MODELS=${MODELS:-"resnet18 resnet50 squeezenet1_1 inception_v3 mobilenet_v2 vit_b_16 bert_base"}
start=$(date +%s); left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - start) )); }
say() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
python3 -c "import cython" 2>/dev/null || python3 -m pip install -q --no-deps --break-system-packages .whl/cython-*.whl 2>&1 | tee -a "$LOG" | tail -2
RLFLOW_CMAKE_ARGS="-DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++" \
  python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" | tee -a "$LOG"; exit 1; }
say "built"
timeout $(( $(left) - ${BENCH_S:-360} )) python3 -m pytest -q -p no:cacheprovider --tb=short tests/test_cuda.py \
  tests/test_cuda_fusion.py tests/test_cuda_gemm_fusion.py tests/test_cuda_chain_fusion.py tests/test_cuda_tuning.py \
  tests/test_cuda_half.py \
  > "$OUT/pytest.txt" 2>&1; tail -6 "$OUT/pytest.txt" | tee -a "$LOG"
say "cuda tests done"
EVAL=$1
if [ -n "$EVAL" ] && [ -d "$EVAL" ]; then
  # every graph the evaluation wrote: <graph>__original.onnx beside each agent's
  # (not the originals by name: "bert_base" is the builder, the evaluation's may be the export)
  timeout 120 python3 -m rlflow measure "$EVAL"/*.onnx --json "$OUT/eval_measured.json" 2>&1 \
    | grep -v "it/s" | tee -a "$LOG"
  say "eval graphs measured"
fi
for m in $MODELS; do
  [ "$(left)" -lt 45 ] && { say "no time left for $m"; continue; }
  timeout $(( $(left) - 10 )) python3 benchmarks/bench_vs_pytorch.py --models "$m" --math ${MATH:-fp32 tf32} 2>&1 | grep -E "^\||^\{|device|torch" \
    | tee -a "$OUT/vs_pytorch.txt" | tail -3
done
say "done"

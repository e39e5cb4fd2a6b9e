#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stages' functions run in child shells (export -f), not in line
# The GPU test command: on a machine with an NVIDIA GPU, CUDA, cuDNN 9 and cuBLAS, builds
# and installs rlflow with its CUDA backend (the non-editable `pip install .`, without
# build isolation or dependencies: such a machine may have no network), runs every CUDA
# test (pytest -m cuda over the test files that have them, from tests/ so that the
# installed package is tested) and a short benchmarks/bench_vs_pytorch.py, and writes a
# log whose first lines name the commit, the GPU and the CUDA / cuDNN / torch versions and
# whose last line is the summary.
#
#     bash tests/run_gpu.sh [--log PATH]
#
# The log goes to PATH, else $OUT/gpu_test_log.txt where OUT is set, else
# ./gpu_test_log.txt. Settings from the environment:
#   PYTHON                  the interpreter (default python3); it needs setuptools,
#                           Cython, numpy, onnx, h5py, pytest and torch (for the benchmark)
#   RLFLOW_CMAKE_ARGS       CMake flags of the build (default: the system compiler, and a
#                           missing CUDA part is an install error: -DRLFLOW_CUDA=ON)
#   RLFLOW_COMMIT           the commit to name when the tree is a copy of it (not a checkout)
#   RLFLOW_GPU_BENCH_MODELS the benchmark's models (default "squeezenet1_1 resnet18")
# Exits 0 only if the backend was built and loads, no CUDA test failed and at least one
# ran, and the benchmark measured every model without an error. Each stage has a time
# limit, so that the whole command stays within about 8 minutes.
set -euo pipefail

LOG=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --log) [[ $# -ge 2 ]] || { echo "run_gpu.sh: --log needs a path" >&2; exit 2; }; LOG=$2; shift 2 ;;
        -h|--help) sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "run_gpu.sh: unknown argument '$1' (only --log PATH)" >&2; exit 2 ;;
    esac
done
if [[ -z "$LOG" ]]; then
    LOG="${OUT:+$OUT/}gpu_test_log.txt"
fi
mkdir -p "$(dirname "$LOG")"
LOG="$(cd "$(dirname "$LOG")" && pwd)/$(basename "$LOG")"  # absolute: the stages change folder

cd "$(dirname "$0")/.."
ROOT=$(pwd -P)  # physical, as git rev-parse --show-toplevel prints it
PY=${PYTHON:-python3}
CMAKE_ARGS=${RLFLOW_CMAKE_ARGS:--DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ -DRLFLOW_CUDA=ON}
BENCH_MODELS=${RLFLOW_GPU_BENCH_MODELS:-squeezenet1_1 resnet18}
INSTALL_LIMIT_S=180  # a fresh build: ~80 s on 16 cores
TESTS_LIMIT_S=240  # the limits add up to 570 s: the whole command ends within 10 minutes
BENCH_LIMIT_S=120
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rlflow_gpu.XXXXXX")  # outside the source tree
export ROOT PY CMAKE_ARGS BENCH_MODELS WORK  # for the stages, which run in child shells

commit_line() {
    # RLFLOW_COMMIT names the commit of a copied tree (e.g. a `git archive` snapshot); a
    # git checkout counts only where ROOT is its top level, not a folder inside another one.
    if [[ -n "${RLFLOW_COMMIT:-}" ]]; then
        echo "commit: $RLFLOW_COMMIT (from RLFLOW_COMMIT: a copy of that commit's tree)"
    elif [[ "$(git -C "$ROOT" rev-parse --show-toplevel 2> /dev/null)" == "$ROOT" ]]; then
        local sha changed
        sha=$(git -C "$ROOT" rev-parse HEAD)
        changed=$(git -C "$ROOT" status --porcelain --untracked-files=no)
        if [[ -n "$changed" ]]; then
            echo "commit: $sha dirty ($(echo "$changed" | wc -l) tracked files differ from it:" \
                 "$(echo "$changed" | awk '{print $2}' | head -n 8 | tr '\n' ' '))"
        else
            echo "commit: $sha"
        fi
    else
        echo "commit: unknown (not a git checkout here; set RLFLOW_COMMIT=\$(git rev-parse HEAD) to name it)"
    fi
}

header() {
    echo "rlflow GPU test log (tests/run_gpu.sh)"
    commit_line
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  host: $(hostname)"
    local gpus
    gpus=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null \
           | paste -sd ';' - || true)
    echo "gpu: ${gpus:-none found (nvidia-smi failed or is missing)}"
    echo "cuda: $( (nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null) \
                  | grep -o 'release [0-9.]*, V[0-9.]*' || echo 'nvcc not found')"
    echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1)"
    echo "torch: $("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda,
                              "cuDNN", torch.backends.cudnn.version())' 2>&1 | tail -n 1)"
    echo "cmake args: $CMAKE_ARGS"
}

# run_stage NAME LIMIT_S FUNCTION: runs one of this script's functions in a child bash
# under a time limit (its processes are killed with it), says how it ended.
run_stage() {
    local name=$1 limit=$2 start=$SECONDS rc=0
    echo
    echo "=== $name (limit ${limit} s)"
    timeout --kill-after=10 "$limit" bash -c "set -euo pipefail; $3" || rc=$?
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "=== $name: TIMED OUT after ${limit} s"
    else
        echo "=== $name: exit $rc in $((SECONDS - start)) s"
    fi
    return "$rc"
}

install_rlflow() {
    "$PY" -c 'import setuptools, Cython' 2> /dev/null || {
        echo "the build needs setuptools and Cython in $PY (it runs without build isolation)"
        return 1
    }
    RLFLOW_CMAKE_ARGS="$CMAKE_ARGS" "$PY" -m pip install --no-build-isolation --no-deps --no-cache-dir \
        --force-reinstall .
}

check_backend() {  # from outside the source tree, so that the installed package answers
    (cd "$WORK" && "$PY" -c '
from taso_env.gpu import cuda_backend as cb
cb.require()
info = cb.device_info()
print("backend:", info["name"], "| cuDNN", info["cudnn"], "| cuBLAS", info["cublas"],
      "| CUDA runtime", info["cuda_runtime"])')
}

cuda_test_files() {  # the test files with a test marked cuda
    grep -l 'pytest\.mark\.cuda' "$ROOT"/tests/test_*.py | xargs -n 1 basename
}

run_cuda_tests() {
    local files
    mapfile -t files < <(cuda_test_files)
    echo "test files: ${files[*]}"
    (cd "$ROOT/tests" && RLFLOW_TEST_INSTALLED=1 "$PY" -m pytest -m cuda -q -p no:cacheprovider -rfEs --durations=10 \
        --junitxml="$WORK/cuda_tests.xml" "${files[@]}")
}

run_bench() {  # its progress and JSON rows (stderr) go to a file, shown after it
    # shellcheck disable=SC2086  # the model list splits into words
    PYTHONUNBUFFERED=1 "$PY" "$ROOT/benchmarks/bench_vs_pytorch.py" --models $BENCH_MODELS --budget 20 \
        --repeats 20 --math fp32 tf32 2> "$WORK/bench_rows.txt"
}

test_counts() {  # "N passed, N failed, N skipped" from pytest's JUnit XML
    "$PY" - "$WORK/cuda_tests.xml" << 'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    suites = ET.parse(sys.argv[1]).getroot().iter("testsuite")
except (OSError, ET.ParseError):
    print("no results")
    sys.exit()
n = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for s in suites:
    for k in n:
        n[k] += int(s.get(k, 0))
failed = n["failures"] + n["errors"]
print(f"{n['tests'] - failed - n['skipped']} passed, {failed} failed, {n['skipped']} skipped")
EOF
}

bench_verdict() {  # "N models, M with errors (...)" from the benchmark's JSON rows
    "$PY" - "$WORK/bench_rows.txt" << 'EOF'
import json
import sys

try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    print("no rows")
    sys.exit()
rows = []
for line in lines:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        continue
    if isinstance(row, dict) and "model" in row:
        rows.append(row)
bad = [r["model"] for r in rows if "error" in r or "errors" in r or r.get("ort_equal") is not True]
print(f"{len(rows)} models, {len(bad)} with errors" + (f" ({', '.join(bad)})" if bad else ""))
EOF
}

main() {
    header
    local install="not run" backend="not run" tests="not run" bench="not run" ok=1
    if run_stage "install rlflow with the CUDA backend" "$INSTALL_LIMIT_S" install_rlflow; then
        install="ok"
        if run_stage "CUDA backend" 30 check_backend; then backend="ok"; else backend="FAILED"; ok=0; fi
    else
        install="FAILED"; ok=0
    fi
    if [[ $backend == ok ]]; then
        local tests_rc=0
        run_stage "CUDA tests" "$TESTS_LIMIT_S" run_cuda_tests || tests_rc=$?
        tests=$(test_counts)
        [[ $tests =~ ^[1-9][0-9]*\ passed,\ 0\ failed ]] || ok=0
        if [[ $tests_rc -eq 124 || $tests_rc -eq 137 ]]; then
            tests="TIMED OUT after $TESTS_LIMIT_S s ($tests)"; ok=0
        elif [[ $tests_rc -ne 0 && $tests_rc -ne 1 ]]; then  # 1: some test failed, counted above
            tests="pytest exit $tests_rc ($tests)"; ok=0
        fi
        local bench_rc=0
        run_stage "bench_vs_pytorch ($BENCH_MODELS)" "$BENCH_LIMIT_S" run_bench || bench_rc=$?
        echo "--- the benchmark's rows (stderr):"
        cat "$WORK/bench_rows.txt" 2> /dev/null || true
        bench=$(bench_verdict)
        if [[ $bench_rc -ne 0 ]]; then
            bench="FAILED, exit $bench_rc ($bench)"; ok=0
        elif ! [[ $bench =~ ^[1-9][0-9]*\ models,\ 0\ with ]]; then
            ok=0
        fi
    fi
    echo
    local commit
    commit=$(commit_line | cut -d ' ' -f 2-3 | sed 's/ (.*//')  # the sha, "dirty" if so
    echo "SUMMARY: $([[ $ok == 1 ]] && echo PASS || echo FAIL) | commit $commit |" \
         "install: $install | backend: $backend | CUDA tests: $tests | bench: $bench | $SECONDS s"
    [[ $ok == 1 ]]
}

export -f install_rlflow check_backend cuda_test_files run_cuda_tests run_bench
echo "run_gpu.sh: writing the log to $LOG"
rc=0
main 2>&1 | tee "$LOG" || rc=$?
rm -rf "$WORK"
exit "$rc"

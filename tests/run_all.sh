#!/usr/bin/env bash
# The test command of the README: installs everything on a fresh machine, builds and
# runs the C++ unit tests (ctest), then the Python tests (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q -r requirements.txt -r requirements-test.txt
"$PY" -m pip install -q -e .
cmake -S . -B build/ctest -DRLFLOW_BUILD_PYTHON=OFF -DRLFLOW_BUILD_TESTS=ON > /dev/null
cmake --build build/ctest -j "$(nproc)" > /dev/null
ctest --test-dir build/ctest --output-on-failure
"$PY" -m pytest -q "$@"

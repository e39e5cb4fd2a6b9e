#!/usr/bin/env bash
# The test command of the README: installs everything on a fresh machine (rlflow itself
# with the non-editable `pip install .`, as a user gets it), builds and runs the C++
# unit tests (ctest), then the Python tests (pytest) against the installed package.
# Extra arguments go to pytest, which runs from tests/ (so the source tree cannot shadow
# the installed package): `bash tests/run_all.sh test_env.py -k reward`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q -r requirements.txt -r requirements-test.txt
"$PY" -m pip install -q ".[ray]"
cmake -S . -B build/ctest -DRLFLOW_BUILD_PYTHON=OFF -DRLFLOW_BUILD_TESTS=ON > /dev/null
cmake --build build/ctest -j "$(nproc)" > /dev/null
ctest --test-dir build/ctest --output-on-failure
cd tests
RLFLOW_TEST_INSTALLED=1 "$PY" -m pytest -q -p no:cacheprovider "$@"

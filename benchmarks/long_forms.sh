#!/usr/bin/env bash
# The long forms of the tests the test command runs short (docs/testplane.md, "What runs short"):
# the same assertions over more cases. Run from the repository root with the test environment
# (bash hack/test.sh once makes .venv; the fault campaign's long form is
# benchmarks/fault_campaign.py). About 10 minutes on 2 cores, and the real-node e2e with the
# migratable example's own 1000 steps about 10 more (it sets up the real parts itself).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SPECON_FUZZ_EXAMPLES=2600 "$PY" -m pytest -q -p no:cacheprovider tests/manager/test_fuzz_http.py
SPECON_ORACLE_WORKLOADS=200 "$PY" -m pytest -q -p no:cacheprovider \
  tests/sim/test_oracle.py::test_no_policy_beats_the_oracle_on_random_workloads
SPECON_E2E_STEPS=1000 bash hack/test.sh -p no:cacheprovider tests/nodes/test_e2e.py

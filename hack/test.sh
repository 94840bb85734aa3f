#!/usr/bin/env bash
# The test command: installs what the tests need (idempotently, cached) and runs the whole suite.
# Extra arguments go to pytest (for example: bash hack/test.sh tests/core -x).
# Setup pieces that need real parts (the Kubernetes test plane, Docker Engine, Prometheus,
# Chromium) live in hack/test.d/*.sh; each is sourced in order and may append a command to
# CLEANUP to undo what it started (only what it started).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export ROOT

CLEANUP=()
cleanup() {
  local i
  for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do eval "${CLEANUP[$i]}" || true; done
}
trap cleanup EXIT

log() { printf '\033[1m[test]\033[0m %s\n' "$*" >&2; }
# shellcheck source=hack/lib/apt.sh
source "$ROOT/hack/lib/apt.sh"

VENV=${SPECON_VENV:-$ROOT/.venv}
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  python3 -m venv "$VENV"
fi
export PATH="$VENV/bin:$PATH"
stamp="$VENV/.specon-deps-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  log "installing the package and test dependencies"
  python -m pip install -q --upgrade pip
  python -m pip install -q -e '.[test]'
  touch "$stamp"
else
  python -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || python -m pip install -q -e '.[test]'
fi

log "ruff"
ruff check .
log "mypy (strict on the core)"
mypy specon specon_agent specon_manager

for piece in hack/test.d/*.sh; do
  [ -e "$piece" ] || continue
  log "setup: $piece"
  # shellcheck disable=SC1090
  source "$piece"
done

log "pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
exit $rc

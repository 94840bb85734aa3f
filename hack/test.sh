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

# With no pytest arguments the whole suite runs: hack/prepare.sh fills the real parts' caches in
# the background from the start (its own session, so that an early exit stops its whole build
# tree), beside the virtual environment, the linters and the first pytest pass.
if [ $# -eq 0 ]; then
  PREPARE_LOG=$(mktemp "${TMPDIR:-/tmp}/specon-prepare.XXXXXX")
  export SPECON_PREPARE_READY=$PREPARE_LOG.ready
  CLEANUP+=("rm -f '$SPECON_PREPARE_READY'")
  log "prepare: filling the real parts' caches in the background (hack/prepare.sh, log $PREPARE_LOG)"
  setsid bash hack/prepare.sh >"$PREPARE_LOG" 2>&1 </dev/null &
  prepare_pid=$!
  CLEANUP+=("kill -- -$prepare_pid 2>/dev/null")
  prepare_start=$SECONDS
fi

VENV=${SPECON_VENV:-$ROOT/.venv}
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  python3 -m venv "$VENV"
fi
export PATH="$VENV/bin:$PATH"
stamp="$VENV/.specon-deps-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -e "$stamp" ]; then
  log "installing the package and test dependencies"
  # setuptools as pyproject.toml's build-system asks: the later installs build without isolation
  python -m pip install -q --upgrade pip 'setuptools>=77'
  python -m pip install -q -e '.[test]'
  touch "$stamp"
else
  python -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || python -m pip install -q -e '.[test]'
fi

log "ruff"
ruff check .
log "mypy (strict on the core)"
mypy specon specon_agent specon_manager

# The tests that need no real part (no plane, engine, node, PyTorch or browser): with no pytest
# arguments they run first, while hack/prepare.sh fills the real parts' caches in the background
# (on a cold machine the Go builds alone take tens of minutes; docs/testplane.md has the figures).
PURE='not plane and not docker and not nodes and not torch and not chromium'

# pytest's exit 5 ("no tests collected") is no failure for one of two passes.
run_pytest() {
  local rc=0
  python -m pytest "$@" || rc=$?
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}

setup_pieces() {
  for piece in hack/test.d/*.sh; do
    [ -e "$piece" ] || continue
    log "setup: $piece"
    # shellcheck disable=SC1090
    source "$piece"
  done
}

if [ $# -gt 0 ]; then
  # Arguments name what to run: set everything up first, then one pytest.
  setup_pieces
  log "pytest"
  set +e
  python -m pytest "$@"
  rc=$?
  set -e
  exit $rc
fi

# The first pass on several processes (pytest-xdist), a test file per process at a time (its
# module-scoped servers started once); SPECON_TEST_WORKERS=1 runs it in this process.
workers=${SPECON_TEST_WORKERS:-$(nproc)}
[ "$workers" -gt 4 ] && workers=4
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile)
log "pytest, first pass: the tests that need no real part ($PURE), $workers process(es)"
set +e
run_pytest -m "$PURE" "${parallel[@]}" --durations=20
rc_pure=$?
set -e

# A pytest in the background, beside the next steps: its own temporary folder (pytest prunes
# the numbered ones of other sessions) and no cache; its output is printed when it is waited for.
start_background_pytest() {  # NAME ARGS...: sets bg_pid, bg_log
  local name=$1
  shift
  bg_log=$(mktemp "${TMPDIR:-/tmp}/specon-$name.XXXXXX")
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/specon-$name-tmp.XXXXXX")
  CLEANUP+=("rm -rf '$bg_log' '$tmp'")
  run_pytest "$@" -p no:cacheprovider --basetemp "$tmp" >"$bg_log" 2>&1 &
  bg_pid=$!
  CLEANUP+=("kill $bg_pid 2>/dev/null")
}
wait_background_pytest() {  # PID LOG: prints the log, returns pytest's exit
  local rc=0
  wait "$1" || rc=$?
  cat "$2"
  return "$rc"
}

# The middle pass: the tests on PyTorch and Chromium, which need no Go build and compare no CPU
# shares, in the background from the moment their parts are in place: on a cold machine while
# the (niced) builds go on, on a warm one beside the first step of the second pass.
MIDDLE='(torch or chromium) and not plane and not docker and not nodes'
log "prepare: waiting for the packages and the frameworks' environments"
while [ ! -e "$SPECON_PREPARE_READY" ] && kill -0 "$prepare_pid" 2>/dev/null; do sleep 5; done
rc_middle=0
for piece in hack/test.d/30-torch.sh hack/test.d/35-frameworks.sh hack/test.d/50-chromium.sh; do
  log "setup: $piece"
  # shellcheck disable=SC1090
  source "$piece" || rc_middle=1
done
middle_pid=
if [ "$rc_middle" = 0 ]; then
  start_background_pytest middle -m "$MIDDLE" --durations=10
  middle_pid=$bg_pid middle_log=$bg_log
  log "pytest, middle pass: the tests on PyTorch and Chromium ($MIDDLE), in the background (log $middle_log)"
fi

log "prepare: waiting for the background set-up"
set +e
wait "$prepare_pid"
rc_prepare=$?
set -e
cat "$PREPARE_LOG" >&2
log "prepare: done $((SECONDS - prepare_start)) s after it started (exit $rc_prepare)"
rm -f "$PREPARE_LOG"

setup_pieces

# The second pass, the tests on real parts, in two steps. First the fault campaign (its own
# plane and its own Docker Engine; its jobs are busybox loops that sleep) runs in the
# background beside the tests on the KWOK plane (API calls and waits; on the first pass's
# processes, a test file per process, each process with a plane of its own), and beside the
# middle pass if it still runs: none of them compares CPU shares. Then, once all of them are
# done, the tests on Docker Engine and on real nodes, which run training jobs and measure
# their CPU, alone.
SECOND="not ($PURE) and not ($MIDDLE)"
start_background_pytest campaign tests/campaign -m "$SECOND" --durations=5
campaign_pid=$bg_pid campaign_log=$bg_log
log "pytest, second pass (1/2): the fault campaign in the background (log $campaign_log) beside the tests on the KWOK plane ($workers process(es), each with a plane of its own)"
set +e
run_pytest -m "$SECOND and not docker and not nodes" "${parallel[@]}" --durations=15
rc_kwok=$?
log "pytest, second pass: waiting for the fault campaign"
wait_background_pytest "$campaign_pid" "$campaign_log"
rc_campaign=$?
if [ -n "$middle_pid" ]; then
  log "pytest: waiting for the middle pass"
  wait_background_pytest "$middle_pid" "$middle_log"
  rc_middle=$?
fi
log "pytest, second pass (2/2): the tests on Docker Engine and on real nodes"
run_pytest -m "$SECOND and (docker or nodes)" --ignore=tests/campaign --durations=20
rc_real=$?
set -e
log "pytest: first pass exit $rc_pure, middle pass exit $rc_middle, second pass exit" \
  "$rc_kwok (KWOK plane), $rc_campaign (campaign), $rc_real (Docker and real nodes)"
[ "$rc_pure" = 0 ] && [ "$rc_middle" = 0 ] && [ "$rc_kwok" = 0 ] && [ "$rc_campaign" = 0 ] \
  && [ "$rc_real" = 0 ]

#!/usr/bin/env bash
# Fills every cache the real-part tests need, so that hack/test.d/*.sh afterwards finds them warm
# and takes seconds: Debian's packages (one apt-get call for all of them), the base image's root
# filesystem tarball, the frameworks' environments (hack/lib/frameworks.sh) and the Go builds
# (the plane, Kueue, the Kubeflow controllers). Starts no service and exports nothing.
# hack/test.sh runs it in the background while the tests that need none of it run, then waits
# for it; run alone it is the whole cold set-up.
#
# Each step's wall time goes to stderr as "[prepare] STEP: N s" (docs/testplane.md quotes them).
# A failed step is reported and the rest still run: the test.d piece that needs it fails later
# with its own message, where the user looks.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=hack/lib/apt.sh
source "$ROOT/hack/lib/apt.sh"

say() { printf '[prepare] %s\n' "$*" >&2; }
failed=0
step() {
  local name=$1 start=$SECONDS
  shift
  if "$@"; then
    say "$name: $((SECONDS - start)) s"
  else
    say "$name: FAILED after $((SECONDS - start)) s (the test.d piece that needs it will say why)"
    failed=1
  fi
}

# The packages the test.d pieces would install one by one, each only if its command is missing.
debian_packages() {
  local want=()
  command -v dockerd >/dev/null 2>&1 || want+=(docker.io)
  command -v busybox >/dev/null 2>&1 || want+=(busybox-static)
  [ -x "${SPECON_CNI_BIN:-/usr/lib/cni}/bridge" ] || want+=(containernetworking-plugins)
  command -v ipset >/dev/null 2>&1 || want+=(ipset)
  dpkg-query -W -f='${Status}\n' python3-torch 2>/dev/null | grep -q 'install ok installed' \
    || want+=(python3-torch)
  dpkg-query -W -f='${Status}\n' python3-sklearn 2>/dev/null | grep -q 'install ok installed' \
    || want+=(python3-sklearn)
  command -v prometheus >/dev/null 2>&1 || want+=(prometheus)
  command -v chromium >/dev/null 2>&1 || want+=(chromium fonts-dejavu-core)
  command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
  [ ${#want[@]} -gt 0 ] || return 0
  say "apt-get install ${want[*]}"
  local prom_before
  prom_before=$(pgrep -x prometheus || true)
  specon_apt update -q >/dev/null || return 1
  specon_apt install -y -q --no-install-recommends "${want[@]}" >/dev/null || return 1
  # The prometheus package's maintainer script may start a server: stop only that one (the
  # tests start their own, as hack/test.d/40-prometheus.sh does after its own install).
  local pid
  for pid in $(pgrep -x prometheus || true); do
    case " $prom_before " in *" $pid "*) ;; *) kill "$pid" 2>/dev/null || true ;; esac
  done
}

go_builds() {
  # Sequential and niced: on two cores parallel Go builds only fight over the same CPU.
  nice -n 19 bash "$ROOT/hack/testplane/build.sh" >/dev/null &&
    nice -n 19 bash "$ROOT/hack/ecosystem/kueue/build.sh" >/dev/null &&
    nice -n 19 bash "$ROOT/hack/ecosystem/kubeflow/build.sh" >/dev/null &&
    nice -n 19 bash "$ROOT/hack/kube-score/build.sh" >/dev/null &&
    nice -n 19 bash "$ROOT/hack/kube-router/build.sh" >/dev/null
}

if [ "${SPECON_SKIP_PLANE:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  go=skip
else
  go=build
fi

# The Go builds are CPU; the packages and the base image's debootstrap are mostly network and
# disk, so the two lines run side by side.
(
  [ "$go" = build ] && step "go builds (plane, kueue, kubeflow, kube-score, kube-router)" go_builds
  exit "$failed"
) &
go_pid=$!
step "debian packages" debian_packages
if [ "${SPECON_SKIP_DOCKER:-0}" != 1 ]; then
  step "base image root filesystem" bash "$ROOT/hack/images/build-base.sh" --tarball-only
fi
# The live callback tests' Lightning and transformers environments (pip over Debian's torch,
# which the packages above bring).
# shellcheck source=hack/lib/frameworks.sh
source "$ROOT/hack/lib/frameworks.sh"
log() { say "$@"; }
step "frameworks' environments (lightning, transformers)" \
  framework_venvs "${SPECON_TORCH_PYTHON:-}"
# Everything but the Go builds is in place: hack/test.sh may start the tests that need only
# PyTorch and Chromium while the builds go on.
[ -n "${SPECON_PREPARE_READY:-}" ] && touch "$SPECON_PREPARE_READY"
wait "$go_pid" || failed=1
exit "$failed"

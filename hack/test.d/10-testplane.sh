# The real Kubernetes test plane for the tests marked `plane`: builds etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kwok and helm from pinned Go modules (cached by version
# under ~/.cache/specon-testplane; a cold build takes tens of minutes, a warm one seconds) and
# exports SPECON_TESTPLANE_BIN. Sourced by hack/test.sh. Starts nothing: the tests start the plane.
# SPECON_SKIP_PLANE=1 skips the build and the plane tests (they report why); CI=true never skips.

if [ "${SPECON_SKIP_PLANE:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  log "testplane: skipped (SPECON_SKIP_PLANE=1); tests marked plane will be skipped"
else
  if [ "${SPECON_SKIP_PLANE:-0}" = 1 ]; then
    log "testplane: CI=true, so SPECON_SKIP_PLANE=1 is ignored"
    export SPECON_SKIP_PLANE=0
  fi
  log "testplane: building or reusing the binaries (hack/testplane/build.sh)"
  # Niced: a cold build is long and must not starve whatever else shares the machine.
  if ! SPECON_TESTPLANE_BIN=$(nice -n 19 bash "$ROOT/hack/testplane/build.sh"); then
    log "testplane: the build failed; on a machine without Go, set SPECON_SKIP_PLANE=1 to skip" \
      "the tests marked plane"
    exit 1
  fi
  export SPECON_TESTPLANE_BIN
  log "testplane: binaries in $SPECON_TESTPLANE_BIN"
fi

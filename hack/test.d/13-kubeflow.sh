# The real job controllers for the Kubeflow plane tests (tests/manager/test_kubeflow_plane.py):
# builds the Kubeflow Training Operator and JobSet from pinned Go modules (cached by version under
# ~/.cache/specon-ecosystem; cold a few minutes, warm seconds) and exports SPECON_KUBEFLOW_BIN.
# Sourced by hack/test.sh after 10-testplane.sh, and skipped with the plane: the same switch
# (SPECON_SKIP_PLANE=1) skips both, and under CI=true neither is ever skipped.

if [ "${SPECON_SKIP_PLANE:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  log "kubeflow: skipped with the plane (SPECON_SKIP_PLANE=1); its plane tests will be skipped"
else
  log "kubeflow: building or reusing the controllers (hack/ecosystem/kubeflow/build.sh)"
  if ! SPECON_KUBEFLOW_BIN=$(nice -n 19 bash "$ROOT/hack/ecosystem/kubeflow/build.sh"); then
    log "kubeflow: the build failed; on a machine without Go, set SPECON_SKIP_PLANE=1 to skip" \
      "the tests marked plane"
    exit 1
  fi
  export SPECON_KUBEFLOW_BIN
  log "kubeflow: controllers in $SPECON_KUBEFLOW_BIN"
fi

# Kueue for the Kueue side-by-side plane test (tests/manager/test_kueue_plane.py): builds the
# pinned Kueue controller from the Go module proxy (hack/ecosystem/kueue/build.sh; cached under
# ~/.cache/specon-ecosystem, a few minutes cold, instant warm) and exports SPECON_KUEUE_BIN.
# Sourced by hack/test.sh after 10-testplane.sh. Starts nothing: the test starts Kueue.
# Kueue's test is a plane test, so SPECON_SKIP_PLANE=1 skips this build too; CI=true never skips.

if [ "${SPECON_SKIP_PLANE:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  log "kueue: skipped (SPECON_SKIP_PLANE=1); the Kueue plane test will be skipped"
else
  log "kueue: building or reusing the controller (hack/ecosystem/kueue/build.sh)"
  # Niced like the plane's build: it must not starve whatever else shares the machine.
  if ! SPECON_KUEUE_BIN=$(nice -n 19 bash "$ROOT/hack/ecosystem/kueue/build.sh"); then
    log "kueue: the build failed; on a machine without Go, set SPECON_SKIP_PLANE=1 to skip" \
      "the tests marked plane"
    exit 1
  fi
  export SPECON_KUEUE_BIN
  log "kueue: controller in $SPECON_KUEUE_BIN"
fi

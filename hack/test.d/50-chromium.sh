# Headless Chromium (Debian's package) for the tests that look at pages as a person would
# (the status-page screenshot). Sourced by hack/test.sh; installed once, starts nothing.
if ! command -v chromium >/dev/null 2>&1; then
  log "chromium: installing Debian's chromium"
  specon_apt update -q >/dev/null
  specon_apt install -y -q --no-install-recommends chromium \
    fonts-dejavu-core >/dev/null
fi
log "chromium: $(chromium --version 2>/dev/null || echo missing)"

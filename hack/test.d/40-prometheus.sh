# Prometheus for the observation tests (tests/deploy/test_prometheus.py): Debian's `prometheus`
# package, installed once without its recommends. The tests start their own server on a
# loopback port with their own configuration and data folder; this piece starts nothing, and
# stops any server the package's maintainer script started at install (only that one).
# Exports SPECON_PROMETHEUS (the binary). SPECON_SKIP_PROMETHEUS=1 skips (the tests then skip).

if [ "${SPECON_SKIP_PROMETHEUS:-0}" = 1 ]; then
  log "prometheus: skipped (SPECON_SKIP_PROMETHEUS=1)"
else
  if ! command -v prometheus >/dev/null 2>&1; then
    log "prometheus: installing Debian's prometheus"
    export DEBIAN_FRONTEND=noninteractive
    prom_before=$(pgrep -x prometheus || true)
    if ! specon_apt install -y -q --no-install-recommends prometheus >/dev/null 2>&1; then
      specon_apt update -q >/dev/null
      nice -n 19 specon_apt install -y -q --no-install-recommends prometheus >/dev/null
    fi
    for prom_pid in $(pgrep -x prometheus || true); do
      case " $prom_before " in *" $prom_pid "*) ;; *) kill "$prom_pid" 2>/dev/null || true ;; esac
    done
  fi
  SPECON_PROMETHEUS=$(command -v prometheus)
  export SPECON_PROMETHEUS
  log "prometheus: $("$SPECON_PROMETHEUS" --version 2>&1 | head -n1)"
fi

# Real nodes for the tests marked `nodes` (tests/nodelib.py): the kubelet, kube-proxy and CoreDNS
# come from the plane's build (10-testplane.sh); containerd and runc from Debian's docker.io
# (20-docker.sh); this piece installs Debian's CNI plugins and ipset once and checks the rest.
# Starts nothing: the tests start the nodes. SPECON_SKIP_NODES=1 skips (the tests then skip, with
# the reason); under CI=true nothing is skipped.

if [ "${SPECON_SKIP_NODES:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  log "nodes: skipped (SPECON_SKIP_NODES=1); tests marked nodes will be skipped"
else
  export SPECON_CNI_BIN=${SPECON_CNI_BIN:-/usr/lib/cni}
  if [ ! -x "$SPECON_CNI_BIN/bridge" ]; then
    log "nodes: installing Debian's containernetworking-plugins"
    export DEBIAN_FRONTEND=noninteractive
    if ! specon_apt install -y -q --no-install-recommends containernetworking-plugins >/dev/null 2>&1; then
      specon_apt update -q >/dev/null
      specon_apt install -y -q --no-install-recommends containernetworking-plugins >/dev/null
    fi
  fi
  # ipset: kube-router's firewall (tests/nodes/test_network_policy.py) keeps its peers in sets.
  if ! command -v ipset >/dev/null 2>&1; then
    log "nodes: installing Debian's ipset"
    export DEBIAN_FRONTEND=noninteractive
    if ! specon_apt install -y -q --no-install-recommends ipset >/dev/null 2>&1; then
      specon_apt update -q >/dev/null
      specon_apt install -y -q --no-install-recommends ipset >/dev/null
    fi
  fi
  for specon_tool in containerd containerd-shim-runc-v2 runc ctr nsenter unshare ip iptables; do
    command -v "$specon_tool" >/dev/null 2>&1 || log "nodes: $specon_tool is missing (the tests marked nodes will say so)"
  done
  log "nodes: $(containerd --version 2>/dev/null | cut -d' ' -f3), runc $(runc --version 2>/dev/null | head -n1 | cut -d' ' -f3), CNI plugins in $SPECON_CNI_BIN"
fi

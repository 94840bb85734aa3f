#!/usr/bin/env bash
# Builds kube-router (its network-policy controller enforces NetworkPolicy with iptables and
# ipset) from its Go module, pinned below, once per version; tests/nodes/test_network_policy.py
# runs it as a process in each real node's network namespace and skips when it is not built.
# --print: print the binary's path only (built or not).
#
# Why v2.1.0: the one version the Go module proxy serves this project. Security advisories are
# reported against it; only its firewall runs, against the private test plane, and it ships in
# nothing.
#
# Cache: ${SPECON_KUBE_ROUTER_CACHE:-~/.cache/specon-kube-router}/<version>/kube-router
set -euo pipefail
VERSION=v2.1.0
CACHE_ROOT=${SPECON_KUBE_ROUTER_CACHE:-$HOME/.cache/specon-kube-router}
BIN="$CACHE_ROOT/$VERSION/kube-router"
if [ "${1:-}" = --print ]; then
  echo "$BIN"
  exit 0
fi
[ -x "$BIN" ] && { echo "$BIN"; exit 0; }
command -v go >/dev/null 2>&1 || { echo "kube-router: go is not installed" >&2; exit 1; }
mkdir -p "$CACHE_ROOT/$VERSION"
work=$(mktemp -d "$CACHE_ROOT/$VERSION/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$work" \
  go install "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$VERSION" >&2
mv "$work/kube-router" "$BIN"
echo "$BIN"

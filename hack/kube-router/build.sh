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
. "$(dirname "$0")/../lib/go_tool.sh"
print=()
[ "${1:-}" = --print ] && print=(--print)
specon_go_tool kube-router v2.1.0 "${SPECON_KUBE_ROUTER_CACHE:-$HOME/.cache/specon-kube-router}" \
  github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "${print[@]}" CGO_ENABLED=0

#!/usr/bin/env bash
# Builds kube-score (a linter of Kubernetes objects) from its Go module, pinned below, once per
# version; tests/deploy/test_kube_score.py runs it on `helm template` output when it is cached
# and skips otherwise. --print: print the binary's path only (built or not).
#
# Cache: ${SPECON_KUBE_SCORE_CACHE:-~/.cache/specon-kube-score}/<version>/kube-score
set -euo pipefail
. "$(dirname "$0")/../lib/go_tool.sh"
print=()
[ "${1:-}" = --print ] && print=(--print)
specon_go_tool kube-score v1.20.0 "${SPECON_KUBE_SCORE_CACHE:-$HOME/.cache/specon-kube-score}" \
  github.com/zegl/kube-score/cmd/kube-score "${print[@]}"

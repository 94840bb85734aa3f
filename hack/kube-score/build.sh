#!/usr/bin/env bash
# Builds kube-score (a linter of Kubernetes objects) from its Go module, pinned below, once per
# version; tests/deploy/test_kube_score.py runs it on `helm template` output when it is cached
# and skips otherwise. --print: print the binary's path only (built or not).
#
# Cache: ${SPECON_KUBE_SCORE_CACHE:-~/.cache/specon-kube-score}/<version>/kube-score
set -euo pipefail
VERSION=v1.20.0
CACHE_ROOT=${SPECON_KUBE_SCORE_CACHE:-$HOME/.cache/specon-kube-score}
BIN="$CACHE_ROOT/$VERSION/kube-score"
if [ "${1:-}" = --print ]; then
  echo "$BIN"
  exit 0
fi
[ -x "$BIN" ] && { echo "$BIN"; exit 0; }
command -v go >/dev/null 2>&1 || { echo "kube-score: go is not installed" >&2; exit 1; }
mkdir -p "$CACHE_ROOT/$VERSION"
work=$(mktemp -d "$CACHE_ROOT/$VERSION/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
GOFLAGS=-mod=mod GOBIN="$work" go install "github.com/zegl/kube-score/cmd/kube-score@$VERSION" >&2
mv "$work/kube-score" "$BIN"
echo "$BIN"

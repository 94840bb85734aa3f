#!/usr/bin/env bash
# Builds the Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue) from the pinned Go module
# beside this script, cached by version, and copies Kueue's CRDs and webhook manifests out of the
# module cache next to it; prints the bin dir. Used by the Kueue side-by-side plane test
# (tests/manager/kueuelib.py).
#
# Usage: hack/ecosystem/kueue/build.sh            # build if needed, print the bin dir on stdout
#        hack/ecosystem/kueue/build.sh --print    # print the bin dir without building (may not exist)
# Cache: ${SPECON_ECOSYSTEM_CACHE:-~/.cache/specon-ecosystem}/kueue-<version>-<hash>/bin, holding
# `kueue`, `crd/*.yaml`, `crd-conversion/*.yaml` and `webhook/manifests.yaml`; the hash covers
# go.mod, go.sum, this script and the Go version, so a bump builds into a fresh folder and the
# old one can simply be deleted.
set -euo pipefail

# A function, so bash parses the whole script before running it (editing it mid-build is safe).
main() {
  HERE=$(cd "$(dirname "$0")" && pwd)
  # A fresh shell may lack Go's default install folder on its PATH.
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; fi
  CACHE_ROOT=${SPECON_ECOSYSTEM_CACHE:-$HOME/.cache/specon-ecosystem}
  # A dependency's `go` or `toolchain` line must never trigger a toolchain download.
  export GOTOOLCHAIN=local
  # The module graph is committed: a build must not rewrite go.mod or go.sum.
  export GOFLAGS="-mod=readonly -buildvcs=false"

  say() { printf '[kueue] %s\n' "$*" >&2; }

  # Read from go.mod (not from Go), so `--print` works without Go and costs nothing.
  VERSION=$(awk '$1 == "sigs.k8s.io/kueue" && $2 ~ /^v/ { print $2; exit }
    $1 == "require" && $2 == "sigs.k8s.io/kueue" { print $3; exit }' "$HERE/go.mod")
  [ -n "$VERSION" ] || { say "cannot read the pinned Kueue version from $HERE/go.mod"; exit 2; }

  go_version=$(go env GOVERSION 2>/dev/null || echo "no-go")
  hash=$(cd "$HERE" && cat build.sh go.mod go.sum | { cat; echo "$go_version"; } \
    | sha256sum | cut -c1-10)
  BIN="$CACHE_ROOT/kueue-$VERSION-$hash/bin"

  complete() {
    [ -e "$BIN/.complete" ] && [ -x "$BIN/kueue" ] && [ -d "$BIN/crd" ] \
      && [ -e "$BIN/webhook/manifests.yaml" ]
  }

  if [ "${1:-}" = "--print" ]; then
    echo "$BIN"
    exit 0
  fi
  if complete; then
    echo "$BIN"
    exit 0
  fi
  command -v go >/dev/null || { say "go is not installed: cannot build Kueue"; exit 3; }

  mkdir -p "${BIN%/bin}"
  # One build at a time per version: a second caller waits, then finds the cache complete.
  exec 9>"${BIN%/bin}/.lock"
  flock 9
  if complete; then
    echo "$BIN"
    exit 0
  fi

  say "building Kueue $VERSION into $BIN (cold: several minutes on 2 cores)"
  local start=$SECONDS work="${BIN%/bin}/bin.partial"
  mkdir -p "$work/crd"
  (cd "$HERE" && go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$VERSION" \
    -o "$work/kueue" sigs.k8s.io/kueue/cmd/kueue)
  # What a kustomize install of the module would apply, as the module ships it: the CRDs
  # (crd/), the conversion-webhook patches its kustomization enables (crd-conversion/) and the
  # webhook configurations (webhook/manifests.yaml). The tests point them at the controller.
  local src
  src=$(cd "$HERE" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)/config/components
  mkdir -p "$work/crd-conversion" "$work/webhook"
  cp "$src"/crd/bases/*.yaml "$work/crd/"
  sed -n 's|^- path: \(patches/webhook_in_[a-z]*\.yaml\)$|\1|p' "$src/crd/kustomization.yaml" \
    | while read -r patch; do cp "$src/crd/$patch" "$work/crd-conversion/"; done
  cp "$src/webhook/manifests.yaml" "$work/webhook/"
  chmod -R u+w "$work"
  echo "$VERSION" >"$work/kueue.version"

  rm -rf "$BIN"
  mv "$work" "$BIN"
  touch "$BIN/.complete"
  say "done in $((SECONDS - start)) s"
  echo "$BIN"
}

main "$@"

#!/usr/bin/env bash
# Builds the real job controllers that the Kubeflow plane tests run against the test plane: the
# Kubeflow Training Operator (PyTorchJob) and JobSet, from the pinned Go modules beside this
# script, cached by version; copies their CRDs from the module cache; prints the bin dir.
#
# Usage: hack/ecosystem/kubeflow/build.sh            # build if needed, print the bin dir
#        hack/ecosystem/kubeflow/build.sh --print    # print the bin dir without building
# Cache: ${SPECON_ECOSYSTEM_CACHE:-~/.cache/specon-ecosystem}/kubeflow-<versions>-<hash>/bin,
# holding training-operator, jobset and crds/*.yaml. The hash covers the go.mod and go.sum files,
# this script and the Go version, so a bump of a pin builds into a fresh folder.
set -euo pipefail

# A function, so bash parses the whole script before running it (see hack/testplane/build.sh).
main() {
  HERE=$(cd "$(dirname "$0")" && pwd)
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; fi
  CACHE_ROOT=${SPECON_ECOSYSTEM_CACHE:-$HOME/.cache/specon-ecosystem}
  export GOTOOLCHAIN=local
  export GOFLAGS="-mod=readonly -buildvcs=false"

  say() { printf '[kubeflow] %s\n' "$*" >&2; }

  # The version of module $2 required in folder $1's go.mod (read from the file: no Go needed).
  pinned() {
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
      "$HERE/$1/go.mod"
  }

  TRAINING=$(pinned training-operator github.com/kubeflow/training-operator)
  JOBSET=$(pinned jobset sigs.k8s.io/jobset)
  for v in TRAINING JOBSET; do
    [ -n "${!v}" ] || { say "cannot read the pinned $v version from $HERE/*/go.mod"; exit 2; }
  done

  go_version=$(go env GOVERSION 2>/dev/null || echo "no-go")
  hash=$(cd "$HERE" && cat build.sh ./*/go.mod ./*/go.sum 2>/dev/null \
    | { cat; echo "$go_version"; } | sha256sum | cut -c1-10)
  KEY="kubeflow-training-$TRAINING-jobset-$JOBSET-$hash"
  BIN="$CACHE_ROOT/$KEY/bin"
  BINARIES=(training-operator jobset)
  CRDS=(kubeflow.org_pytorchjobs.yaml jobset.x-k8s.io_jobsets.yaml)

  complete() {
    [ -e "$BIN/.complete" ] || return 1
    local f
    for f in "${BINARIES[@]}"; do [ -x "$BIN/$f" ] || return 1; done
    for f in "${CRDS[@]}"; do [ -s "$BIN/crds/$f" ] || return 1; done
  }

  if [ "${1:-}" = "--print" ]; then
    echo "$BIN"
    exit 0
  fi
  if complete; then
    echo "$BIN"
    exit 0
  fi
  command -v go >/dev/null || { say "go is not installed: cannot build the Kubeflow controllers"; exit 3; }

  mkdir -p "$CACHE_ROOT/$KEY"
  # One build at a time per version: a second caller waits, then finds the cache complete.
  exec 9>"$CACHE_ROOT/$KEY/.lock"
  flock 9
  if complete; then
    echo "$BIN"
    exit 0
  fi

  say "building into $BIN (cold: several minutes on 2 cores)"
  start=$(date +%s)
  work="$CACHE_ROOT/$KEY/bin.partial"
  mkdir -p "$work/crds"

  build() { # folder, output name, package
    local dir=$1 out=$2 pkg=$3 t0=$SECONDS
    (cd "$HERE/$dir" && go build -trimpath -ldflags "-s -w" -o "$work/$out" "$pkg")
    say "built $out in $((SECONDS - t0)) s"
  }
  # The module's folder in the module cache (downloaded by the build above if it was not there).
  moddir() { (cd "$HERE/$1" && go list -m -f '{{.Dir}}' "$2"); }

  [ -x "$work/training-operator" ] || build training-operator training-operator \
    github.com/kubeflow/training-operator/cmd/training-operator.v1
  [ -x "$work/jobset" ] || build jobset jobset sigs.k8s.io/jobset
  # The CRDs of exactly the pinned versions, as each project ships them.
  cp "$(moddir training-operator github.com/kubeflow/training-operator)/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" \
    "$work/crds/"
  cp "$(moddir jobset sigs.k8s.io/jobset)/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$work/crds/"
  chmod u+w "$work/crds/"*.yaml
  printf 'training-operator %s\njobset %s\n' "$TRAINING" "$JOBSET" >"$work/versions"

  rm -rf "$BIN"
  mv "$work" "$BIN"
  touch "$BIN/.complete"
  say "done in $(($(date +%s) - start)) s"
  echo "$BIN"
}

main "$@"

#!/usr/bin/env bash
# Builds the test plane's binaries (etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
# kwok, helm, and for the real nodes kubelet, kube-proxy, coredns and the pause binary) from the
# pinned Go modules beside this script, cached by version; prints the bin dir.
#
# Usage: hack/testplane/build.sh            # build if needed, print the bin dir on stdout
#        hack/testplane/build.sh --print    # print the bin dir without building (may not exist)
# Cache: ${SPECON_TESTPLANE_CACHE:-~/.cache/specon-testplane}/<versions>-<hash>/bin; the hash
# covers the go.mod, go.sum and main.go files, this script and the Go version, so a bump of any
# pin builds into a fresh folder and the old one can simply be deleted.
set -euo pipefail

# Wrapped in a function so bash parses the whole script before running it: editing this file
# while a long build runs cannot corrupt that build.
main() {
  HERE=$(cd "$(dirname "$0")" && pwd)
  # A fresh shell may lack Go's default install folder on its PATH.
  if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then PATH="/usr/local/go/bin:$PATH"; fi
  CACHE_ROOT=${SPECON_TESTPLANE_CACHE:-$HOME/.cache/specon-testplane}
  # A dependency's `go` or `toolchain` line must never trigger a toolchain download.
  export GOTOOLCHAIN=local
  # The module graph is committed: a build must not rewrite go.mod or go.sum.
  export GOFLAGS="-mod=readonly -buildvcs=false"

  say() { printf '[testplane] %s\n' "$*" >&2; }

  # The pinned version of module $2 in the go.mod of folder $1 (read from the file, so this works
  # without Go, and `--print` costs nothing).
  pinned() {
    awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
      "$HERE/$1/go.mod"
  }

  KUBE=$(pinned kube k8s.io/kubernetes)
  ETCD=$(pinned etcd go.etcd.io/etcd/server/v3)
  KWOK=$(pinned kwok sigs.k8s.io/kwok)
  HELM=$(pinned helm helm.sh/helm/v3)
  COREDNS=$(pinned coredns github.com/coredns/coredns)
  for v in KUBE ETCD KWOK HELM COREDNS; do
    [ -n "${!v}" ] || { say "cannot read the pinned $v version from $HERE/*/go.mod"; exit 2; }
  done

  go_version=$(go env GOVERSION 2>/dev/null || echo "no-go")
  hash=$(cd "$HERE" && cat build.sh ./*/go.mod ./*/go.sum ./*/*.go 2>/dev/null \
    | { cat; echo "$go_version"; } | sha256sum | cut -c1-10)
  KEY="k8s-$KUBE-etcd-$ETCD-kwok-$KWOK-helm-$HELM-coredns-$COREDNS-$hash"
  BIN="$CACHE_ROOT/$KEY/bin"
  BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kwok helm kubelet kube-proxy
    coredns pause)

  complete() {
    [ -e "$BIN/.complete" ] || return 1
    local b
    for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
  }

  if [ "${1:-}" = "--print" ]; then
    echo "$BIN"
    exit 0
  fi
  if complete; then
    echo "$BIN"
    exit 0
  fi
  command -v go >/dev/null || { say "go is not installed: cannot build the test plane"; exit 3; }

  mkdir -p "$CACHE_ROOT/$KEY"
  # One build at a time per version: a second caller waits, then finds the cache complete.
  exec 9>"$CACHE_ROOT/$KEY/.lock"
  flock 9
  if complete; then
    echo "$BIN"
    exit 0
  fi

  say "building into $BIN (cold: tens of minutes on 2 cores)"
  start=$(date +%s)
  work="$CACHE_ROOT/$KEY/bin.partial"
  mkdir -p "$work"

  kmajor=${KUBE#v}; kmajor=${kmajor%%.*}
  kminor=${KUBE#v"$kmajor".}; kminor=${kminor%%.*}
  kube_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_ldflags+=" -X $pkg.gitVersion=$KUBE -X $pkg.gitMajor=$kmajor -X $pkg.gitMinor=$kminor"
    kube_ldflags+=" -X $pkg.gitTreeState=clean"
  done

  build() { # folder, ldflags, packages...
    local dir=$1 ldflags=$2
    shift 2
    local t0=$SECONDS
    (cd "$HERE/$dir" && go build -trimpath -ldflags "$ldflags" -o "$work/" "$@")
    say "built $dir in $((SECONDS - t0)) s"
  }

  [ -x "$work/etcd" ] || build etcd "-s -w" .
  [ -x "$work/kwok" ] || build kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE#v}" \
    sigs.k8s.io/kwok/cmd/kwok
  [ -x "$work/helm" ] || build helm "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    helm.sh/helm/v3/cmd/helm
  [ -x "$work/coredns" ] || build coredns "-s -w" .
  local kube_missing=() b
  for b in kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy; do
    [ -x "$work/$b" ] || kube_missing+=("k8s.io/kubernetes/cmd/$b")
  done
  if [ "${#kube_missing[@]}" -gt 0 ]; then
    build kube "$kube_ldflags" "${kube_missing[@]}"
  fi
  # The pod sandbox's pause process, from the C source in the pinned Kubernetes module, built
  # as upstream's build/pause/Makefile does (static, so it runs in an otherwise empty image).
  if [ ! -x "$work/pause" ]; then
    local src
    src=$(cd "$HERE/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause
    local ptag
    ptag=$(sed -n 's/^TAG ?= //p' "$src/Makefile")
    gcc -Os -Wall -Werror -static -DVERSION="v$ptag-specon" -o "$work/pause" "$src/linux/pause.c"
    echo "$ptag" >"$work/pause.version"
    say "built pause $ptag"
  fi

  rm -rf "$BIN"
  mv "$work" "$BIN"
  touch "$BIN/.complete"
  say "done in $(($(date +%s) - start)) s"
  echo "$BIN"
}

main "$@"

# specon_go_tool NAME VERSION CACHE_ROOT PACKAGE [--print] [ENV=VALUE...]: a pinned Go tool built
# once per version with `go install PACKAGE@VERSION` into CACHE_ROOT/VERSION/NAME, printing the
# binary's path (with --print: the path only, built or not). Extra ENV=VALUE words are set for
# the build (CGO_ENABLED=0, ...). Sourced by hack/kube-score/build.sh and
# hack/kube-router/build.sh.
specon_go_tool() {
  local name=$1 version=$2 cache_root=$3 package=$4
  shift 4
  local bin="$cache_root/$version/$name"
  if [ "${1:-}" = --print ]; then
    echo "$bin"
    return 0
  fi
  [ -x "$bin" ] && { echo "$bin"; return 0; }
  command -v go >/dev/null 2>&1 || { echo "$name: go is not installed" >&2; return 1; }
  mkdir -p "$cache_root/$version"
  local work
  work=$(mktemp -d "$cache_root/$version/build.XXXXXX")
  if env "$@" GOFLAGS=-mod=mod GOBIN="$work" go install "$package@$version" >&2 &&
      mv "$work/$name" "$bin"; then
    rm -rf "$work"
    echo "$bin"
  else
    rm -rf "$work"
    return 1
  fi
}

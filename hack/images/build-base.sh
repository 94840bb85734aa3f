#!/usr/bin/env bash
# Builds the local base image specon-base:<tag> from Debian packages only (no image registry):
# debootstrap a minimal bookworm root filesystem with Python, NumPy, PyTorch and scikit-learn,
# then `docker import` it. Cached: skips when the image exists; the rootfs tarball is kept
# under ~/.cache/specon-images/ so a fresh engine only re-imports it. See docs/images.md.
set -euo pipefail

# The pins. Bump the tag in base-tag whenever SUITE or PACKAGES change, so no stale cache is reused.
SUITE=bookworm
PACKAGES=python3,python3-numpy,python3-torch,python3-sklearn,ca-certificates,procps
TAG=${SPECON_BASE_TAG:-$(cat "$(dirname "$0")/base-tag")}
IMAGE=specon-base:$TAG
CACHE=${SPECON_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specon-images}
TARBALL=$CACHE/specon-base-$TAG.tar

say() { printf '[images] %s\n' "$*" >&2; }
# shellcheck source=hack/lib/apt.sh
source "$(dirname "$0")/../lib/apt.sh"

# --tarball-only: make the cached root filesystem tarball and stop (no engine needed; hack/prepare.sh
# runs it in the background before an engine is up).
TARBALL_ONLY=0
[ "${1:-}" = "--tarball-only" ] && TARBALL_ONLY=1

if [ "$TARBALL_ONLY" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE present"
  exit 0
fi

# The Debian mirror this machine's apt already uses for $SUITE (never a hard-coded host).
mirror() {
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
    awk -v s="$SUITE" '$2 == s { print $1; exit }'
}

if [ ! -s "$TARBALL" ]; then
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    specon_apt update -q >/dev/null
    specon_apt install -y -q --no-install-recommends debootstrap >/dev/null
  }
  MIRROR=$(mirror)
  [ -n "$MIRROR" ] || { say "no apt source for suite $SUITE on this machine"; exit 1; }
  mkdir -p "$CACHE"
  ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  chmod 0755 "$ROOTFS" # it becomes the image's /, which mktemp made private
  trap 'rm -rf "$ROOTFS" "$TARBALL.part"' EXIT
  say "debootstrap $SUITE ($PACKAGES) into $ROOTFS (a few minutes)"
  NICE=(nice -n 19)
  command -v ionice >/dev/null && NICE+=(ionice -c3)
  if ! "${NICE[@]}" debootstrap --variant=minbase --include="$PACKAGES" \
      "$SUITE" "$ROOTFS" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1; then
    tail -n 30 "$CACHE/debootstrap.log" >&2
    [ -f "$ROOTFS/debootstrap/debootstrap.log" ] && tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
    exit 1
  fi
  # What went in, for the record (docs/images.md explains how to read it).
  chroot "$ROOTFS" dpkg-query -W -f '${Package}=${Version}\n' >"$CACHE/specon-base-$TAG.manifest"
  # Slim: package caches, lists, docs and man pages are of no use in a training container.
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
  "${NICE[@]}" tar --numeric-owner --xattrs -C "$ROOTFS" -cf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
  rm -rf "$ROOTFS"
  trap - EXIT
fi
[ "$TARBALL_ONLY" = 1 ] && exit 0

say "docker import $TARBALL as $IMAGE"
docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change 'CMD ["/usr/bin/python3"]' \
  --change "LABEL org.specon.base.suite=$SUITE org.specon.base.packages=$PACKAGES" \
  "$TARBALL" "$IMAGE" >/dev/null
docker image inspect "$IMAGE" --format '{{.Id}} {{.Size}}' >&2

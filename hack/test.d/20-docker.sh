# Docker Engine for the tests marked `docker`: installs Debian's docker.io when dockerd is missing,
# starts dockerd when no engine answers (stopped again at exit, only if started here), builds the
# local base image (hack/images/build-base.sh). Sourced by hack/test.sh; SPECON_SKIP_DOCKER=1 skips.

if [ "${SPECON_SKIP_DOCKER:-0}" = 1 ]; then
  log "docker: skipped (SPECON_SKIP_DOCKER=1); tests marked docker will be skipped"
else
  if ! command -v dockerd >/dev/null 2>&1; then
    log "docker: installing Debian's docker.io"
    specon_apt update -q >/dev/null
    specon_apt install -y -q --no-install-recommends docker.io >/dev/null
  fi
  # A static busybox: the image of the fault campaign's private engine (tests/campaign), made
  # with no registry and no base image.
  if ! command -v busybox >/dev/null 2>&1; then
    log "docker: installing Debian's busybox-static"
    specon_apt update -q >/dev/null
    specon_apt install -y -q --no-install-recommends busybox-static >/dev/null
  fi

  if docker info >/dev/null 2>&1; then
    log "docker: an engine already answers; using it"
  else
    SPECON_DOCKERD_STATE=${XDG_CACHE_HOME:-$HOME/.cache}/specon-docker
    mkdir -p "$SPECON_DOCKERD_STATE"
    # First the engine's defaults (overlay2, bridge network); if dockerd dies at start, the
    # fallback drops what a sandbox most often lacks (iptables/bridge, then overlay mounts).
    # Extra flags for every attempt: SPECON_DOCKERD_ARGS.
    specon_dockerd_pid=
    for specon_dockerd_try in "" "--iptables=false --bridge=none" \
        "--iptables=false --bridge=none --storage-driver=vfs"; do
      log "docker: starting dockerd ${specon_dockerd_try:-(defaults)} ${SPECON_DOCKERD_ARGS:-}" \
        "(log: $SPECON_DOCKERD_STATE/dockerd.log)"
      # shellcheck disable=SC2086  # the flag lists are meant to split into words
      setsid dockerd $specon_dockerd_try ${SPECON_DOCKERD_ARGS:-} \
        >>"$SPECON_DOCKERD_STATE/dockerd.log" 2>&1 </dev/null &
      specon_dockerd_pid=$!
      for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$specon_dockerd_pid" 2>/dev/null || break
        sleep 0.5
      done
      if docker info >/dev/null 2>&1; then
        break
      fi
      log "docker: dockerd did not come up; last lines of its log:"
      tail -n 5 "$SPECON_DOCKERD_STATE/dockerd.log" >&2 || true
      kill "$specon_dockerd_pid" 2>/dev/null || true
      wait "$specon_dockerd_pid" 2>/dev/null || true
      specon_dockerd_pid=
    done
    if [ -z "$specon_dockerd_pid" ]; then
      log "docker: no engine could be started (set SPECON_SKIP_DOCKER=1 to run without one)"
      false
    fi
    # Stops only the dockerd started here (its managed containerd goes down with it).
    CLEANUP+=("kill $specon_dockerd_pid 2>/dev/null; for _ in \$(seq 60); do kill -0 $specon_dockerd_pid 2>/dev/null || break; sleep 0.5; done")
    log "docker: dockerd $specon_dockerd_pid up ($(docker info --format '{{.Driver}}, cgroup {{.CgroupVersion}} {{.CgroupDriver}}'))"
  fi

  bash "$ROOT/hack/images/build-base.sh"
  SPECON_BASE_IMAGE=specon-base:$(cat "$ROOT/hack/images/base-tag")
  export SPECON_BASE_IMAGE
fi

# specon_apt ARGS...: apt-get that waits for another apt or dpkg to finish instead of failing
# ("Could not get lock /var/lib/apt/lists/lock"): DPkg::Lock::Timeout covers dpkg's lock, and
# the whole call is retried while the package lists' lock is held. Sourced by hack/test.sh
# (for its pieces) and hack/images/build-base.sh.
specon_apt() {
  local try out rc
  for try in $(seq 60); do
    out=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@" 2>&1)
    rc=$?
    if [ "$rc" = 0 ]; then
      return 0
    fi
    case "$out" in
      *"Could not get lock"*|*"Unable to lock"*|*"Unable to acquire the dpkg frontend lock"*)
        [ "$try" = 1 ] && printf '[apt] another apt or dpkg holds the lock; waiting\n' >&2
        sleep 5 ;;
      *) printf '%s\n' "$out" >&2; return "$rc" ;;
    esac
  done
  printf '%s\n' "$out" >&2
  return "$rc"
}

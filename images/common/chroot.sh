# Sourced by build-debian.sh for every Debian recipe.
# release_chroot ROOTFS: unmounts the /dev and /proc a recipe bound into ROOTFS. Tools run
# in the chroot (code-server --install-extension, package scripts) can leave a child behind
# for a few seconds: after a grace period, stop the processes whose root is ROOTFS (by PID).
release_chroot() {
  local rfs=$1 p i
  for i in $(seq 1 50); do
    umount "$rfs/proc" 2> /dev/null || true
    umount "$rfs/dev" 2> /dev/null || true
    mountpoint -q "$rfs/dev" || mountpoint -q "$rfs/proc" || return 0
    if [ "$i" = 20 ]; then
      for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2> /dev/null)" = "$rfs" ] && kill "${p#/proc/}" 2> /dev/null
      done
    fi
    sleep 0.2
  done
  echo "cannot unmount $rfs/dev or $rfs/proc" >&2
  return 1
}

# chroot_run ROOTFS CMD...: runs CMD in ROOTFS with /dev and /proc bound, then releases them.
chroot_run() {
  local rfs=$1
  shift
  mountpoint -q "$rfs/dev" || mount --bind /dev "$rfs/dev"
  mountpoint -q "$rfs/proc" || mount -t proc proc "$rfs/proc"
  local rc=0
  chroot "$rfs" "$@" || rc=$?
  release_chroot "$rfs"
  return $rc
}

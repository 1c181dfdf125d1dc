#!/usr/bin/env bash
# Builds a Debian-based template image without Docker: mmdebstrap (bookworm, minbase) with
# the recipe's packages, the shared guest pieces (images/common/rootfs), the recipe's own
# files and `customize` step, then mkfs.ext4 -d and a qcow2 of it. The kernel and the
# stage-1 initramfs are the minimal template's (scripts/build-image.sh; template-agnostic).
#   images/common/build-debian.sh TEMPLATE OUT_DIR [--size SIZE] [--hash-only]
# Writes OUT_DIR/{vmlinuz,initrd.img,rootfs.qcow2,manifest.json}. Progress lines on stdout:
#   "STEP <name>" when a step starts; everything else is log output.
# DOPPIO_KEEP_FAILED_ROOTFS=DIR (a path that does not exist yet, on the same filesystem as
# OUT_DIR): a failed build's rootfs is moved there for inspection instead of being deleted.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
common=$repo/images/common
# shellcheck source=images/common/image-args.sh
. "$common/image-args.sh"
parse_image_args "$@"
src=$repo/images/$template
[ -f "$src/recipe.sh" ] || { echo "no Debian recipe at $src/recipe.sh" >&2; exit 2; }
cache=${DOPPIO_IMAGE_CACHE:-/var/cache/doppiobox}

# The recipe sets PACKAGES, DEFAULT_SIZE, HASH_INPUTS (extra strings) and defines
# customize ROOTFS (runs on the host; may chroot) and optionally preflight (runs before the
# first download; exit 4 when something the recipe needs cannot be had).
PACKAGES=()
HASH_INPUTS=()
DEFAULT_SIZE=2G
# shellcheck source=/dev/null
. "$common/chroot.sh"
# shellcheck source=/dev/null
. "$common/code-server.sh"
# shellcheck source=/dev/null
. "$src/recipe.sh"
size=${size:-$DEFAULT_SIZE}
check_image_size
BASE_PACKAGES=(busybox-static iproute2 python3 openssh-server ca-certificates curl procps libstdc++6)

inputs_hash=$(
  {
    echo "debian-recipe-format 1 bookworm minbase $template $size ${BASE_PACKAGES[*]} ${PACKAGES[*]} ${HASH_INPUTS[*]}"
    for d in "$common" "$src" "$repo/extensions/doppio-devbox" "$repo/images/minimal"; do
      (cd "$d" && find . -type f ! -name '*.vsix' | LC_ALL=C sort | xargs sha256sum)
    done
    sha256sum "$repo/scripts/build-image.sh" | cut -d' ' -f1
  } | sha256sum | cut -d' ' -f1
)
exit_if_built
if declare -F preflight > /dev/null; then preflight; fi
started=$(date +%s)

mkdir -p "$(dirname "$out")" "$cache"
work=$(mktemp -d "$(dirname "$out")/.build-$template.XXXXXX")
cleanup() {
  local rc=$? m
  for m in proc dev; do
    if mountpoint -q "$work/rootfs/$m"; then umount "$work/rootfs/$m" || umount -l "$work/rootfs/$m" || true; fi
  done
  # Never delete through a mount (a bound /dev is the host's).
  if findmnt -rn -o TARGET | grep -q "^$work/"; then
    echo "build-debian: mounts left under $work; not removing it" >&2
    return
  fi
  if [ "$rc" != 0 ] && [ -n "${DOPPIO_KEEP_FAILED_ROOTFS:-}" ] && [ -d "$work/rootfs" ] &&
    mv -T "$work/rootfs" "$DOPPIO_KEEP_FAILED_ROOTFS" 2> /dev/null; then
    echo "build-debian: kept the failed build's rootfs in $DOPPIO_KEEP_FAILED_ROOTFS"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "STEP kernel"
# flock: concurrent template builds share this cached kernel build.
DOPPIO_DEB_CACHE=$cache/debs flock "$cache/kernel-minimal.lock" \
  "$repo/scripts/build-image.sh" minimal "$cache/kernel-minimal" --size 64M

echo "STEP build_rootfs"
rfs=$work/rootfs
includes=$(IFS=,; echo "${BASE_PACKAGES[*]},${PACKAGES[*]}")
mmdebstrap --variant=minbase --mode=root --include="$includes" bookworm "$rfs"
# Host keys are per clone (generated at first resume); apt lists are stale by boot time.
rm -f "$rfs"/etc/ssh/ssh_host_*
rm -rf "$rfs"/var/lib/apt/lists/* "$rfs"/var/cache/apt/*.bin "$rfs"/var/cache/apt/archives/*.deb
cp -a "$common/rootfs/." "$rfs/"
cp "$repo/images/minimal/rootfs/usr/lib/doppio/json.awk" "$repo/images/minimal/rootfs/usr/lib/doppio/github-url" "$rfs/usr/lib/doppio/"
ln -sf /bin/busybox "$rfs/sbin/init"
[ -e "$rfs/usr/bin/usleep" ] || ln -s /bin/busybox "$rfs/usr/bin/usleep"
: > "$rfs/etc/machine-id"
echo "$template" > "$rfs/etc/hostname"
mkdir -p "$rfs/data" "$rfs/root/.ssh" "$rfs/etc/doppio/rcS.d" "$rfs/etc/doppio/apply.d"
chmod 0700 "$rfs/root/.ssh"
[ -d "$src/rootfs" ] && cp -a "$src/rootfs/." "$rfs/"
cat "$common/rootfs/etc/inittab.common" "$src/inittab" > "$rfs/etc/inittab"
rm -f "$rfs/etc/inittab.common"

echo "STEP customize"
customize "$rfs"

echo "STEP write_image"
mkfs.ext4 -q -F -L doppio-root -E root_owner=0:0 -d "$rfs" "$work/rootfs.ext4" "$size"
qemu-img convert -f raw -O qcow2 "$work/rootfs.ext4" "$work/rootfs.qcow2"
used_kb=$(du -sk "$rfs" | cut -f1)
mkdir -p "$out"
cp "$cache/kernel-minimal/vmlinuz" "$out/vmlinuz"
cp "$cache/kernel-minimal/initrd.img" "$out/initrd.img"
mv "$work/rootfs.qcow2" "$out/rootfs.qcow2"
kmanifest=$(cat "$cache/kernel-minimal/manifest.json")
cat > "$out/manifest.json" <<JSON
{"template":"$template","format":"ext4-in-qcow2","size":"$size","rootfsUsedKb":$used_kb,"inputsHash":"$inputs_hash","buildSeconds":$(($(date +%s) - started)),"kernel":$kmanifest,"builtAt":"$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
JSON
echo "$inputs_hash" > "$out/.inputs-hash"
echo "built image $template in $out ($inputs_hash, $((used_kb / 1024)) MiB used, $(($(date +%s) - started)) s)"

#!/usr/bin/env bash
# Builds a template image (kernel, initramfs, qcow2 root disk) into OUT_DIR, e.g.
#   scripts/build-image.sh minimal .data/images/minimal/1 [--size 512M] [--hash-only]
# Only Debian's apt is used (apt-get download + dpkg-deb -x): no mounts, no loop devices.
# Idempotent: skips the build when OUT_DIR holds a build of the same inputs hash.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
args_lib=$repo/images/common/image-args.sh
# shellcheck source=images/common/image-args.sh
. "$args_lib"
parse_image_args "$@"
size=${size:-512M}
check_image_size

src=$repo/images/$template
[ -d "$src" ] || { echo "no image recipe at $src" >&2; exit 2; }

MODULES=(virtio_ring virtio virtio_mmio virtio_blk failover net_failover virtio_net qemu_fw_cfg)
# One apt-cache call (it is the slow part of the up-to-date check): the candidate cloud
# kernel (via the metapackage's exact dependency) and busybox-static versions.
resolve() {
  apt-cache show --no-all-versions linux-image-cloud-amd64 busybox-static 2>/dev/null | awk '
    /^Package:/ { pkg = $2 }
    pkg == "linux-image-cloud-amd64" && /^Depends:/ {
      if (match($0, /linux-image-6\.1\.[0-9-]+-cloud-amd64 \(= [^)]+\)/)) {
        split(substr($0, RSTART, RLENGTH), a, /[ ()=]+/); print "kpkg=" a[1]; print "kver=" a[2]
      }
    }
    pkg == "busybox-static" && /^Version:/ { print "bver=" $2 }'
}
versions=$(resolve)
if ! grep -q '^kpkg=' <<<"$versions"; then
  # Fresh hosts (CI) may have no package lists yet.
  apt-get update -qq >/dev/null 2>&1 || true
  versions=$(resolve)
fi
kpkg=$(sed -n 's/^kpkg=//p' <<<"$versions")
kver=$(sed -n 's/^kver=//p' <<<"$versions")
bver=$(sed -n 's/^bver=//p' <<<"$versions")
[ -n "$kpkg" ] && [ -n "$kver" ] && [ -n "$bver" ] ||
  { echo "cannot resolve the Debian cloud kernel / busybox-static packages with apt-cache" >&2; exit 1; }

inputs_hash=$(
  {
    echo "recipe-format 1 $template $size $kpkg $kver busybox-static $bver ${MODULES[*]}"
    (cd "$src" && find . -type f | LC_ALL=C sort | xargs sha256sum)
    sha256sum "$0" "$args_lib" | cut -d' ' -f1
  } | sha256sum | cut -d' ' -f1
)
exit_if_built

mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.build-$template.XXXXXX")
trap 'rm -rf "$work"' EXIT
debs=${DOPPIO_DEB_CACHE:-$(dirname "$out")/.debs}
mkdir -p "$debs"

fetch_deb() { # package version -> path of that exact .deb in the cache
  local f
  cached() { ls "$debs/$1"_*.deb 2>/dev/null | grep -F "_$(echo "$2" | sed 's/:/%3a/')_" | head -1 || true; }
  f=$(cached "$1" "$2")
  if [ -z "$f" ]; then
    # Into a directory of its own, then renamed into the cache: builds sharing the cache
    # never see (or replace) each other's half-downloaded files.
    local dl
    dl=$(mktemp -d "$debs/.download.XXXXXX")
    chmod 755 "$dl"
    (cd "$dl" && apt-get download "$1=$2" >/dev/null 2>&1) ||
      { rm -rf "$dl"; echo "apt-get download $1=$2 failed" >&2; exit 1; }
    mv -f "$dl"/*.deb "$debs/"
    rm -rf "$dl"
    f=$(cached "$1" "$2")
  fi
  [ -n "$f" ] || { echo "downloaded $1=$2 but cannot find the .deb" >&2; exit 1; }
  echo "$f"
}
dpkg-deb -x "$(fetch_deb "$kpkg" "$kver")" "$work/kernel"
dpkg-deb -x "$(fetch_deb busybox-static "$bver")" "$work/busybox"
busybox=$work/busybox/bin/busybox
moddir=$(echo "$work"/kernel/lib/modules/*)

# initramfs: busybox, the modules (flat) and the stage-1 init.
ird=$work/initramfs
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$busybox" "$ird/bin/busybox"
for m in "${MODULES[@]}"; do
  f=$(find "$moddir" -name "$m.ko" | head -1)
  [ -n "$f" ] || { echo "module $m.ko not found in $kpkg" >&2; exit 1; }
  cp "$f" "$ird/lib/modules/"
done
install -m 0755 "$src/initramfs/init" "$ird/init"
(cd "$ird" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -9n) > "$work/initrd.img"

# root filesystem: busybox with its applet links plus the recipe's files.
rfs=$work/rootfs
mkdir -p "$rfs"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,data,root,etc}
chmod 1777 "$rfs/tmp"
cp "$busybox" "$rfs/bin/busybox"
"$busybox" --list-full | while read -r applet; do
  [ "$applet" = "bin/busybox" ] || [ -e "$rfs/$applet" ] || ln -s /bin/busybox "$rfs/$applet"
done
cp -a "$src/rootfs/." "$rfs/"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$rfs/etc/passwd"
printf 'root:x:0:\n' > "$rfs/etc/group"
mkfs.ext4 -q -F -L doppio-root -E root_owner=0:0 -d "$rfs" "$work/rootfs.ext4" "$size" >/dev/null
qemu-img convert -f raw -O qcow2 "$work/rootfs.ext4" "$work/rootfs.qcow2"

mkdir -p "$out"
cp "$(echo "$work"/kernel/boot/vmlinuz-*)" "$out/vmlinuz.tmp"
mv "$out/vmlinuz.tmp" "$out/vmlinuz"
mv "$work/initrd.img" "$out/initrd.img"
mv "$work/rootfs.qcow2" "$out/rootfs.qcow2"
cat > "$out/manifest.json" <<JSON
{"template":"$template","kernelPackage":"$kpkg","kernelVersion":"$kver","busybox":"$bver","size":"$size","inputsHash":"$inputs_hash","builtAt":"$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
JSON
echo "$inputs_hash" > "$out/.inputs-hash"
echo "built image $template in $out ($inputs_hash)"

# Sourced by scripts/build-image.sh and images/common/build-debian.sh: their one command
# line and their one up-to-date check, so the agent's image builder
# (apps/agent/src/images/builder.ts) can drive both the same way.
#   SCRIPT TEMPLATE OUT_DIR [--size SIZE] [--hash-only]

image_usage() {
  echo "usage: $0 TEMPLATE OUT_DIR [--size SIZE] [--hash-only]" >&2
  exit 2
}

# Sets template, out, size (empty without --size: the script picks its default) and hash_only.
parse_image_args() {
  [ $# -ge 2 ] || image_usage
  template=$1
  out=$2
  shift 2
  size=""
  hash_only=0
  while [ $# -gt 0 ]; do
    case $1 in
      --size) size=${2:?}; shift 2 ;;
      --hash-only) hash_only=1; shift ;;
      *) image_usage ;;
    esac
  done
  [[ $template =~ ^[a-z][a-z0-9-]*$ ]] || { echo "bad template name: $template" >&2; exit 2; }
}

check_image_size() {
  [[ $size =~ ^[0-9]+[MG]$ ]] || { echo "bad size: $size" >&2; exit 2; }
}

# Exits when nothing needs building: --hash-only prints $inputs_hash; an OUT_DIR that holds a
# complete build of the same inputs is kept as it is.
exit_if_built() {
  if [ "$hash_only" = 1 ]; then
    echo "$inputs_hash"
    exit 0
  fi
  if [ -f "$out/.inputs-hash" ] && [ "$(cat "$out/.inputs-hash")" = "$inputs_hash" ] &&
    [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ] && [ -f "$out/rootfs.qcow2" ]; then
    echo "image $template up to date in $out ($inputs_hash)"
    exit 0
  fi
}

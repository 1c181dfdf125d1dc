# shellcheck shell=bash
# Sourced by build-debian.sh for every Debian recipe ($repo, $cache set).
# install_code_server ROOTFS HOME VERSION [NODE]: code-server VERSION (staged on the host from
# npm by stage-code-server.sh) into ROOTFS with a /usr/local/bin/code-server launcher on NODE,
# the image's path of a Node with the host's major version (its native modules are built on
# the host; default /usr/local/bin/node), and the box's VS Code extension installed for the
# user whose home is HOME, by the image's own code-server in a chroot (so recorded paths are
# the guest's; this also proves code-server runs on NODE).
install_code_server() {
  local rfs=$1 home=$2 version=$3 node=${4:-/usr/local/bin/node}
  local stage=$cache/code-server-$version
  "$repo/images/common/stage-code-server.sh" "$stage" "$version"
  mkdir -p "$rfs/usr/local/lib/code-server"
  cp -a "$stage/node_modules" "$rfs/usr/local/lib/code-server/"
  # code-server's parent gives its child 10 s to say hello; a guest under TCG (no KVM),
  # starting next to other guests, can take longer, and every miss restarts it from zero.
  local wrapper=$rfs/usr/local/lib/code-server/node_modules/code-server/out/node/wrapper.js
  grep -q '^const timeoutInterval = 10000;' "$wrapper" || { echo "code-server wrapper changed: review the timeout patch" >&2; return 1; }
  sed -i 's/^const timeoutInterval = 10000;/const timeoutInterval = 120000;/' "$wrapper"
  printf '#!/bin/sh\nexec %s /usr/local/lib/code-server/node_modules/code-server/out/node/entry.js "$@"\n' \
    "$node" > "$rfs/usr/local/bin/code-server"
  chmod 0755 "$rfs/usr/local/bin/code-server"

  "$repo/extensions/doppio-devbox/pack.sh" "$rfs/tmp/doppio-devbox.vsix"
  mkdir -p "$rfs$home"
  chroot_run "$rfs" env HOME="$home" /usr/local/bin/code-server --install-extension /tmp/doppio-devbox.vsix
  rm -f "$rfs/tmp/doppio-devbox.vsix"
  ls "$rfs$home/.local/share/code-server/extensions" | grep -q '^doppiobox\.doppio-devbox-' ||
    { echo "extension not installed into code-server" >&2; return 1; }
}

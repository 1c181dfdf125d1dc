# shellcheck shell=bash
# The `code` template: Debian bookworm with git, Python, Node 20 and code-server (from
# npm) serving /workspace (the per-box data volume) on 0.0.0.0:8888 without auth (the
# edge does access control), plus the box's own VS Code extension. Sourced by
# images/common/build-debian.sh.
CODE_SERVER_VERSION=${CODE_SERVER_VERSION:-4.100.3}
DEFAULT_SIZE=3G
PACKAGES=(git less nano libgssapi-krb5-2 openssh-client)
# Debian bookworm's nodejs is 18; code-server 4.100.x needs 20: the host's Node 20 binary
# goes into the image, and code-server's native modules are built against it on the host.
NODE_BIN=${NODE_BIN:-$(command -v node)}
NODE_VERSION=$("$NODE_BIN" -v)
HASH_INPUTS=("code-server=$CODE_SERVER_VERSION" "node=$NODE_VERSION")

customize() {
  local rfs=$1
  [[ $NODE_VERSION == v20.* ]] || { echo "code template needs Node 20 on the host (found $NODE_VERSION)" >&2; return 1; }
  install -m 0755 "$NODE_BIN" "$rfs/usr/local/bin/node"
  local stage=$cache/code-server-$CODE_SERVER_VERSION
  "$repo/images/code/stage-code-server.sh" "$stage" "$CODE_SERVER_VERSION"
  mkdir -p "$rfs/usr/local/lib/code-server"
  cp -a "$stage/node_modules" "$rfs/usr/local/lib/code-server/"
  # code-server's parent gives its child 10 s to say hello; a guest under TCG (no KVM),
  # starting next to other guests, can take longer, and every miss restarts it from zero.
  local wrapper=$rfs/usr/local/lib/code-server/node_modules/code-server/out/node/wrapper.js
  grep -q '^const timeoutInterval = 10000;' "$wrapper" || { echo "code-server wrapper changed: review the timeout patch" >&2; return 1; }
  sed -i 's/^const timeoutInterval = 10000;/const timeoutInterval = 120000;/' "$wrapper"
  cat > "$rfs/usr/local/bin/code-server" <<'SH'
#!/bin/sh
exec /usr/local/bin/node /usr/local/lib/code-server/node_modules/code-server/out/node/entry.js "$@"
SH
  chmod 0755 "$rfs/usr/local/bin/code-server"
  ln -sfn /data/workspace "$rfs/workspace"

  # The extension is installed by the image's own code-server, inside the rootfs, so the
  # recorded extension paths are the guest's.
  "$repo/extensions/doppio-devbox/pack.sh" "$rfs/tmp/doppio-devbox.vsix"
  mount --bind /dev "$rfs/dev"
  mount -t proc proc "$rfs/proc"
  HOME=/root chroot "$rfs" /usr/local/bin/code-server --install-extension /tmp/doppio-devbox.vsix
  release_chroot "$rfs"
  rm -f "$rfs/tmp/doppio-devbox.vsix"
  ls "$rfs/root/.local/share/code-server/extensions" | grep -q '^doppiobox\.doppio-devbox-' ||
    { echo "extension not installed into code-server" >&2; return 1; }
}

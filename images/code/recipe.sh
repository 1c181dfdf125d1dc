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
  install_code_server "$rfs" /root "$CODE_SERVER_VERSION"
  ln -sfn /data/workspace "$rfs/workspace"
}

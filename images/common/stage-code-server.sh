#!/usr/bin/env bash
# Installs code-server from npm on the HOST into STAGE_DIR/node_modules/code-server, so the guest needs no compiler: the native modules are built against the host's
# Node 20, so the image runs code-server on a Node 20 too (the `code` template copies the
# host's; `frappe` pins one from npm, images/frappe/versions.json). Workarounds measured on the build hosts:
# libkrb5-dev + ripgrep on the host, npm_config_yes=true for node-pty's `npx node-gyp`,
# --unsafe-perm as root, and @vscode/ripgrep's download cache seeded from Debian's rg
# (its postinstall would otherwise download from GitHub).
#   images/common/stage-code-server.sh STAGE_DIR VERSION
set -euo pipefail
stage=${1:?stage dir}
version=${2:?code-server version}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "bad code-server version: $version" >&2; exit 2; }
# Concurrent builds (two templates, two test files) share the stage: one installs.
mkdir -p "$(dirname "$stage")"
exec 9> "$stage.lock"
flock 9
if [ -f "$stage/node_modules/code-server/out/node/entry.js" ]; then
  echo "code-server $version already staged in $stage"
  exit 0
fi
for bin in rg node npm cc make; do
  command -v "$bin" > /dev/null || { echo "stage-code-server: $bin missing on the host (apt-get install ripgrep libkrb5-dev build-essential)" >&2; exit 1; }
done
[ -e /usr/include/gssapi/gssapi.h ] || [ -e /usr/include/gssapi.h ] || { echo "stage-code-server: libkrb5-dev missing on the host" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# @vscode/ripgrep 1.15.x looks for this archive in $TMPDIR before downloading.
for v in 1.15.9 1.15.10 1.15.11 1.15.12 1.15.13 1.15.14; do
  mkdir -p "$tmp/vscode-ripgrep-cache-$v"
  tar -C "$(dirname "$(command -v rg)")" -czf "$tmp/vscode-ripgrep-cache-$v/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" rg
done
partial="$stage.partial"
rm -rf "$partial"
mkdir -p "$partial"
# A local install: with --global, npm_config_global leaks into code-server's postinstall
# (a nested `npm install` in lib/vscode) and the two fight over the tree (ENOTEMPTY).
echo '{"name":"doppio-code-server-stage","private":true}' > "$partial/package.json"
(cd "$partial" && TMPDIR=$tmp npm_config_yes=true npm install --unsafe-perm --no-package-lock \
  --no-audit --no-fund --loglevel=error "code-server@$version")
test -f "$partial/node_modules/code-server/out/node/entry.js"
rm -rf "$stage"
mv "$partial" "$stage"
echo "staged code-server $version in $stage"

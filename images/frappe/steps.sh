# shellcheck shell=bash
# Steps of the frappe recipe (sourced by recipe.sh; $repo, $cache and the FRAPPE_* vars set).

install_node_yarn() {
  local rfs=$1 stage=$cache/yarn-$YARN_VERSION
  install -m 0755 "$NODE_BIN" "$rfs/usr/local/bin/node"
  # npm itself (for `yarn` installs of apps) comes from the host's npm, on the image's node.
  mkdir -p "$rfs/usr/local/lib/node_modules"
  cp -a "$(npm root -g)/npm" "$rfs/usr/local/lib/node_modules/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rfs/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rfs/usr/local/bin/npx"
  exec 8> "$stage.lock"
  flock 8
  if [ ! -f "$stage/node_modules/yarn/bin/yarn.js" ]; then
    rm -rf "$stage.partial" && mkdir -p "$stage.partial"
    echo '{"name":"doppio-yarn-stage","private":true}' > "$stage.partial/package.json"
    (cd "$stage.partial" && npm install --no-package-lock --no-audit --no-fund --loglevel=error "yarn@$YARN_VERSION")
    rm -rf "$stage" && mv "$stage.partial" "$stage"
  fi
  flock -u 8
  cp -a "$stage/node_modules/yarn" "$rfs/usr/local/lib/node_modules/"
  ln -sf ../lib/node_modules/yarn/bin/yarn.js "$rfs/usr/local/bin/yarn"
}

install_code_server() {
  local rfs=$1 stage=$cache/code-server-$CODE_SERVER_VERSION
  "$repo/images/code/stage-code-server.sh" "$stage" "$CODE_SERVER_VERSION"
  mkdir -p "$rfs/usr/local/lib/code-server"
  cp -a "$stage/node_modules" "$rfs/usr/local/lib/code-server/"
  # code-server's parent gives its child 10 s to say hello; a guest under TCG (no KVM),
  # starting next to other guests, can take longer, and every miss restarts it from zero.
  local wrapper=$rfs/usr/local/lib/code-server/node_modules/code-server/out/node/wrapper.js
  grep -q '^const timeoutInterval = 10000;' "$wrapper" || { echo "code-server wrapper changed: review the timeout patch" >&2; return 1; }
  sed -i 's/^const timeoutInterval = 10000;/const timeoutInterval = 120000;/' "$wrapper"
  printf '#!/bin/sh\nexec /usr/local/bin/node /usr/local/lib/code-server/node_modules/code-server/out/node/entry.js "$@"\n' \
    > "$rfs/usr/local/bin/code-server"
  chmod 0755 "$rfs/usr/local/bin/code-server"
  "$repo/extensions/doppio-devbox/pack.sh" "$rfs/tmp/doppio-devbox.vsix"
  chroot_run "$rfs" env HOME=/home/frappe /usr/local/bin/code-server --install-extension /tmp/doppio-devbox.vsix
  rm -f "$rfs/tmp/doppio-devbox.vsix"
}

configure_services() {
  local rfs=$1
  chroot "$rfs" useradd -m -s /bin/bash -G sudo frappe 2> /dev/null || true
  echo 'frappe ALL=(ALL) NOPASSWD: ALL' > "$rfs/etc/sudoers.d/frappe"
  chmod 0440 "$rfs/etc/sudoers.d/frappe"
  # The extension was installed as root into /home/frappe: hand it over.
  chroot "$rfs" chown -R frappe:frappe /home/frappe
  ln -sfn /data/workspace "$rfs/workspace"
}

# Fails fast, before any PyPI/GitHub step, when this host cannot reach them.
require_network() {
  local ok=1
  curl -fsS -m 10 -o /dev/null "$FRAPPE_PYPI_INDEX/frappe-bench/" 2> /dev/null || ok=0
  curl -fsS -m 10 -o /dev/null "$FRAPPE_GIT_URL.git/info/refs?service=git-upload-pack" 2> /dev/null || ok=0
  if [ $ok = 0 ]; then
    echo "frappe template needs PyPI and GitHub; this host cannot reach them" >&2
    echo "(probed $FRAPPE_PYPI_INDEX and $FRAPPE_GIT_URL; set FRAPPE_PYPI_INDEX/FRAPPE_GIT_URL for mirrors)" >&2
    exit 3
  fi
}

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

# Needs PyPI and GitHub (not reachable on the project's build machines: unverified here).
build_bench() {
  local rfs=$1
  cp "$repo/images/frappe/bench-init.sh" "$rfs/tmp/bench-init.sh"
  chroot_run "$rfs" env FRAPPE_BRANCH="$FRAPPE_BRANCH" FRAPPE_SITE="$FRAPPE_SITE" \
    FRAPPE_PYPI_INDEX="$FRAPPE_PYPI_INDEX" FRAPPE_GIT_URL="$FRAPPE_GIT_URL" FRAPPE_PYTHON="$FRAPPE_PYTHON" \
    /bin/bash /tmp/bench-init.sh
  rm -f "$rfs/tmp/bench-init.sh"
}

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

# Needs PyPI and GitHub (not reachable on the project's build machines: unverified here).
build_bench() {
  local rfs=$1
  cp "$repo/images/frappe/bench-init.sh" "$rfs/tmp/bench-init.sh"
  chroot_run "$rfs" env FRAPPE_BRANCH="$FRAPPE_BRANCH" FRAPPE_SITE="$FRAPPE_SITE" \
    FRAPPE_PYPI_INDEX="$FRAPPE_PYPI_INDEX" FRAPPE_GIT_URL="$FRAPPE_GIT_URL" FRAPPE_PYTHON="$FRAPPE_PYTHON" \
    /bin/bash /tmp/bench-init.sh
  rm -f "$rfs/tmp/bench-init.sh"
}

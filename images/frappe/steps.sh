# shellcheck shell=bash
# Steps of the frappe recipe (sourced by recipe.sh; $repo, $cache and the FRAPPE_* vars set).
# The toolchain steps (Node, npm, yarn, code-server's Node) are in toolchain.sh.

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
  cp "$repo/images/frappe/bench-init.sh" "$repo/images/frappe/python-in-range.sh" "$rfs/tmp/"
  chroot_run "$rfs" env FRAPPE_BRANCH="$FRAPPE_BRANCH" FRAPPE_SITE="$FRAPPE_SITE" \
    FRAPPE_PYPI_INDEX="$FRAPPE_PYPI_INDEX" FRAPPE_GIT_URL="$FRAPPE_GIT_URL" FRAPPE_PYTHON="$FRAPPE_PYTHON" \
    FRAPPE_PYTHON_MIN="$FRAPPE_PYTHON_MIN" FRAPPE_PYTHON_BELOW="$FRAPPE_PYTHON_BELOW" \
    FRAPPE_BENCH_SPEC="$FRAPPE_BENCH_SPEC" /bin/bash /tmp/bench-init.sh
  rm -f "$rfs/tmp/bench-init.sh" "$rfs/tmp/python-in-range.sh"
}

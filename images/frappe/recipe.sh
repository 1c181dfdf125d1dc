# shellcheck shell=bash
# The `frappe` template: MariaDB, Redis, Node + yarn, Python, frappe-bench and Frappe
# (FRAPPE_BRANCH, version-16 by default) with one site created and built, `bench start`
# under supervisord (logs in /var/log/doppio/bench.log), code-server opened on the bench.
# The branch's toolchain comes from versions.json (toolchain.sh): resolved here, printed and
# checked by `preflight` before anything is downloaded. Everything that needs only Debian's
# mirror and npm is built first; the steps that need PyPI and GitHub come last, after a
# reachability check that fails fast (exit 3).
FRAPPE_BRANCH=${FRAPPE_BRANCH:-version-16}
FRAPPE_SITE=${FRAPPE_SITE:-dev.localhost}
# Mirrors may replace these; the reachability check probes exactly what the build uses.
FRAPPE_PYPI_INDEX=${FRAPPE_PYPI_INDEX:-https://pypi.org/simple}
FRAPPE_GIT_URL=${FRAPPE_GIT_URL:-https://github.com/frappe/frappe}
DEFAULT_SIZE=12G
PACKAGES=(git less nano libgssapi-krb5-2 openssh-client mariadb-server mariadb-client
  redis-server supervisor python3-dev python3-venv python3-pip pkg-config
  libmariadb-dev build-essential cron xfonts-75dpi xfonts-base fontconfig libjpeg62-turbo
  wkhtmltopdf sudo)

# shellcheck source=/dev/null
. "$repo/images/frappe/toolchain.sh"
# shellcheck source=/dev/null
. "$repo/images/frappe/steps.sh"

# Sets FRAPPE_PYTHON(_MIN/_BELOW), FRAPPE_NODE(_INTEGRITY), NPM_*, YARN_*, FRAPPE_BENCH_SPEC,
# MARIADB_MIN, REDIS_MIN, CODE_SERVER_VERSION, CS_NODE*; exits 4 when they cannot be met.
frappe_toolchain_resolve
HASH_INPUTS=("frappe=$FRAPPE_BRANCH" "site=$FRAPPE_SITE" "platform=$NODE_PLATFORM"
  "python=$FRAPPE_PYTHON:$FRAPPE_PYTHON_MIN:$FRAPPE_PYTHON_BELOW" "node=$FRAPPE_NODE:$FRAPPE_NODE_INTEGRITY"
  "npm=$NPM_VERSION" "yarn=$YARN_VERSION" "bench=$FRAPPE_BENCH_SPEC"
  "code-server=$CODE_SERVER_VERSION:$CS_NODE:${HOST_NODE%%.*}" "pypi=$FRAPPE_PYPI_INDEX" "git=$FRAPPE_GIT_URL")

customize() {
  local rfs=$1
  check_image_services "$rfs"
  echo "STEP node_yarn_code_server"
  install_node_toolchain "$rfs"
  install_code_server_node "$rfs"
  install_code_server "$rfs" /home/frappe "$CODE_SERVER_VERSION" "$CS_NODE_PATH"
  echo "STEP services"
  configure_services "$rfs"
  echo "STEP network"
  require_network
  echo "STEP bench"
  build_bench "$rfs"
}

# shellcheck shell=bash
# The `frappe` template: MariaDB, Redis, Node + yarn, Python, frappe-bench and Frappe
# (FRAPPE_BRANCH, version-16 by default) with one site created and built, `bench start`
# under supervisord (logs in /var/log/doppio/bench.log), code-server opened on the bench.
# Everything that needs only Debian's mirror and npm is built first; the steps that need
# PyPI and GitHub come last, after a reachability check that fails fast (exit 3).
FRAPPE_BRANCH=${FRAPPE_BRANCH:-version-16}
FRAPPE_SITE=${FRAPPE_SITE:-dev.localhost}
# Mirrors may replace these; the reachability check probes exactly what the build uses.
FRAPPE_PYPI_INDEX=${FRAPPE_PYPI_INDEX:-https://pypi.org/simple}
FRAPPE_GIT_URL=${FRAPPE_GIT_URL:-https://github.com/frappe/frappe}
FRAPPE_PYTHON=${FRAPPE_PYTHON:-3.14}
CODE_SERVER_VERSION=${CODE_SERVER_VERSION:-4.100.3}
YARN_VERSION=${YARN_VERSION:-1.22.22}
DEFAULT_SIZE=12G
PACKAGES=(git less nano libgssapi-krb5-2 openssh-client mariadb-server mariadb-client
  redis-server supervisor python3-dev python3-venv python3-pip pkg-config
  libmariadb-dev build-essential cron xfonts-75dpi xfonts-base fontconfig libjpeg62-turbo
  wkhtmltopdf sudo)
NODE_BIN=${NODE_BIN:-$(command -v node)}
NODE_VERSION=$("$NODE_BIN" -v)
HASH_INPUTS=("frappe=$FRAPPE_BRANCH" "site=$FRAPPE_SITE" "python=$FRAPPE_PYTHON" "code-server=$CODE_SERVER_VERSION"
  "yarn=$YARN_VERSION" "node=$NODE_VERSION" "pypi=$FRAPPE_PYPI_INDEX" "git=$FRAPPE_GIT_URL")

# shellcheck source=/dev/null
. "$repo/images/frappe/steps.sh"

customize() {
  local rfs=$1
  echo "STEP node_yarn_code_server"
  install_node_yarn "$rfs"
  install_code_server "$rfs" /home/frappe "$CODE_SERVER_VERSION"
  echo "STEP services"
  configure_services "$rfs"
  echo "STEP network"
  require_network
  echo "STEP bench"
  build_bench "$rfs"
}

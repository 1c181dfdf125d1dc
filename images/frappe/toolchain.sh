# shellcheck shell=bash
# The toolchain a Frappe branch needs, from images/frappe/versions.json (sourced by recipe.sh;
# $repo and $cache set). `frappe_toolchain_resolve` runs when the recipe is sourced, so the
# resolved versions are part of the inputs hash and even `--hash-only` refuses an impossible
# combination; `preflight` (called by build-debian.sh before its first download) prints the
# toolchain; `install_node_toolchain` puts the branch's Node (npm's official per-platform
# package), npm and yarn into the image, each pinned by version and sha512 and verified
# before it is unpacked. The host's Node is never copied into the image.
# Exit 4 (EXIT_TOOLCHAIN_UNSUPPORTED, apps/agent/src/images/builder.ts) with one
# "frappe toolchain: ..." line on stderr: a requirement this host or image cannot meet.

FRAPPE_VERSIONS_FILE=$repo/images/frappe/versions.json

toolchain_refuse() {
  echo "frappe toolchain: $*" >&2
  exit 4
}

# A value of the table (jq path; $b is the branch, $p the platform), or a refusal naming it.
_tc() {
  jq -er --arg b "$FRAPPE_BRANCH" --arg p "$NODE_PLATFORM" "$1" "$FRAPPE_VERSIONS_FILE" 2> /dev/null ||
    toolchain_refuse "images/frappe/versions.json has no ${1//\$b/$FRAPPE_BRANCH}"
}

# major.minor of a Python version is >= MIN and < BELOW (dpkg orders 3.9 < 3.10 correctly).
_py_in_range() {
  local mm
  mm=$(cut -d. -f1,2 <<< "$1")
  dpkg --compare-versions "$mm" ge "$2" && dpkg --compare-versions "$mm" lt "$3"
}

frappe_toolchain_resolve() {
  local bin
  for bin in jq dpkg npm openssl node; do
    command -v "$bin" > /dev/null || toolchain_refuse "$bin missing on the host (scripts/bootstrap.sh installs it)"
  done
  jq -e . "$FRAPPE_VERSIONS_FILE" > /dev/null 2>&1 || toolchain_refuse "images/frappe/versions.json is not valid JSON"
  case $(uname -m) in
    x86_64) NODE_PLATFORM=linux-x64 ;;
    aarch64) NODE_PLATFORM=linux-arm64 ;;
    *) NODE_PLATFORM=linux-$(uname -m) ;;
  esac
  jq -e --arg b "$FRAPPE_BRANCH" '.branches | has($b)' "$FRAPPE_VERSIONS_FILE" > /dev/null ||
    toolchain_refuse "no toolchain for Frappe branch '$FRAPPE_BRANCH' in images/frappe/versions.json" \
      "(known: $(jq -r '.branches | keys_unsorted | join(", ")' "$FRAPPE_VERSIONS_FILE"))"

  FRAPPE_PYTHON_MIN=$(_tc '.branches[$b].python.min')
  FRAPPE_PYTHON_BELOW=$(_tc '.branches[$b].python.below')
  FRAPPE_PYTHON=${FRAPPE_PYTHON:-$(_tc '.branches[$b].python.install')}
  [[ $FRAPPE_PYTHON =~ ^3\.[0-9]+(\.[0-9]+)?$ ]] ||
    toolchain_refuse "FRAPPE_PYTHON=$FRAPPE_PYTHON is not a Python version (3.N or 3.N.P)"
  _py_in_range "$FRAPPE_PYTHON" "$FRAPPE_PYTHON_MIN" "$FRAPPE_PYTHON_BELOW" ||
    toolchain_refuse "$FRAPPE_BRANCH needs Python >=$FRAPPE_PYTHON_MIN,<$FRAPPE_PYTHON_BELOW;" \
      "Python $FRAPPE_PYTHON is outside that range"

  # The branch's Node: the table's pin, or FRAPPE_NODE with its own FRAPPE_NODE_INTEGRITY.
  NODE_MIN=$(_tc '.branches[$b].node.min')
  local pinned
  pinned=$(_tc '.branches[$b].node.version')
  FRAPPE_NODE=${FRAPPE_NODE:-$pinned}
  [[ $FRAPPE_NODE =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || toolchain_refuse "FRAPPE_NODE=$FRAPPE_NODE is not a Node version (N.N.N)"
  [ "${FRAPPE_NODE%%.*}" -ge "$NODE_MIN" ] ||
    toolchain_refuse "$FRAPPE_BRANCH needs Node >= $NODE_MIN (Frappe's package.json engines); Node $FRAPPE_NODE cannot build it"
  if [ "$FRAPPE_NODE" = "$pinned" ]; then
    FRAPPE_NODE_INTEGRITY=$(jq -r --arg b "$FRAPPE_BRANCH" --arg p "$NODE_PLATFORM" \
      '.branches[$b].node.integrity[$p] // empty' "$FRAPPE_VERSIONS_FILE")
    [ -n "$FRAPPE_NODE_INTEGRITY" ] ||
      toolchain_refuse "no pinned Node $pinned for $NODE_PLATFORM in images/frappe/versions.json (node-$NODE_PLATFORM on npm)"
  elif [ -z "${FRAPPE_NODE_INTEGRITY:-}" ]; then
    toolchain_refuse "FRAPPE_NODE=$FRAPPE_NODE is not the pinned $pinned: set FRAPPE_NODE_INTEGRITY too" \
      "(npm view node-$NODE_PLATFORM@$FRAPPE_NODE dist.integrity)"
  fi
  [[ $FRAPPE_NODE_INTEGRITY =~ ^sha512-[A-Za-z0-9+/]{86}==$ ]] ||
    toolchain_refuse "the Node integrity must be a sha512 SRI string (sha512-...==), got '$FRAPPE_NODE_INTEGRITY'"

  NPM_VERSION=$(_tc '.npm.version')
  NPM_INTEGRITY=$(_tc '.npm.integrity')
  YARN_VERSION=$(_tc '.yarn.version')
  YARN_INTEGRITY=$(_tc '.yarn.integrity')
  FRAPPE_BENCH_SPEC=$(_tc '.branches[$b].frappeBench')
  MARIADB_MIN=$(_tc '.branches[$b].mariadb.min')
  REDIS_MIN=$(_tc '.branches[$b].redis.min')

  # code-server's native modules are built on this host (stage-code-server.sh), so its Node in
  # the image must be the host's major, whatever Node the branch runs on.
  CODE_SERVER_VERSION=$(_tc '.codeServer.version')
  CS_NODE=$(_tc '.codeServer.node.version')
  CS_NODE_INTEGRITY=$(_tc '.codeServer.node.integrity[$p]')
  HOST_NODE=$(node -v)
  local host_major=${HOST_NODE#v}
  [ "${host_major%%.*}" = "${CS_NODE%%.*}" ] ||
    toolchain_refuse "code-server $CODE_SERVER_VERSION runs on Node $CS_NODE in the image, but its native modules" \
      "are built with this host's Node $HOST_NODE: build on a host with Node ${CS_NODE%%.*}"
}

# Upstream version of PACKAGE in the host's apt lists when the host is bookworm (what
# mmdebstrap will install), else nothing: then only the check after mmdebstrap applies.
_bookworm_candidate() {
  grep -qx 'VERSION_CODENAME=bookworm' /etc/os-release 2> /dev/null || return 0
  apt-cache show --no-all-versions "$1" 2> /dev/null | sed -n 's/^Version: //p' | head -1 |
    sed 's/^[0-9]*://; s/-[^-]*$//'
}

_check_service() { # name package minimum version-or-empty where
  [ -n "$4" ] || return 0
  dpkg --compare-versions "$4" ge "$3" ||
    toolchain_refuse "$FRAPPE_BRANCH needs $1 >= $3, but $5 has $2 $4"
}

# Called by build-debian.sh before its first download: what will be built, and the service
# versions Debian can give, checked as far as this host can tell without the network.
preflight() {
  local mariadb redis t="frappe toolchain $FRAPPE_BRANCH:"
  mariadb=$(_bookworm_candidate mariadb-server)
  redis=$(_bookworm_candidate redis-server)
  echo "$t python $FRAPPE_PYTHON via uv, must satisfy >=$FRAPPE_PYTHON_MIN,<$FRAPPE_PYTHON_BELOW (checked after install)"
  echo "$t node $FRAPPE_NODE from npm node-$NODE_PLATFORM (${FRAPPE_NODE_INTEGRITY:0:19}...), Frappe needs >= $NODE_MIN"
  echo "$t npm $NPM_VERSION and yarn $YARN_VERSION on that node (npm registry, pinned integrity)"
  echo "$t frappe-bench$FRAPPE_BENCH_SPEC from PyPI"
  echo "$t mariadb >= $MARIADB_MIN (bookworm: ${mariadb:-checked after mmdebstrap}), redis >= $REDIS_MIN (bookworm: ${redis:-checked after mmdebstrap})"
  echo "$t code-server $CODE_SERVER_VERSION on node $CS_NODE (native modules built with the host's $HOST_NODE)"
  _check_service MariaDB mariadb-server "$MARIADB_MIN" "$mariadb" "Debian bookworm"
  _check_service Redis redis-server "$REDIS_MIN" "$redis" "Debian bookworm"
}

# After mmdebstrap: the service versions the image actually got.
check_image_services() {
  local rfs=$1
  _check_service MariaDB mariadb-server "$MARIADB_MIN" "$(_installed "$rfs" mariadb-server)" "the image"
  _check_service Redis redis-server "$REDIS_MIN" "$(_installed "$rfs" redis-server)" "the image"
  echo "image services: mariadb-server $(_installed "$rfs" mariadb-server), redis-server $(_installed "$rfs" redis-server)"
}

_installed() { # rootfs package -> upstream version installed in it
  dpkg-query --admindir="$1/var/lib/dpkg" -W -f='${Version}' "$2" | sed 's/^[0-9]*://; s/-[^-]*$//'
}

_sri_sha512() { echo "sha512-$(openssl dgst -sha512 -binary < "$1" | base64 -w0)"; }

# npm_tarball NAME VERSION INTEGRITY: the path of NAME@VERSION's registry tarball, cached on
# the host and checked against INTEGRITY on every use (a mismatch is removed and fails).
npm_tarball() {
  local name=$1 version=$2 integrity=$3 dir=$cache/npm-pinned
  local f=$dir/$name-$version.tgz
  mkdir -p "$dir"
  (
    flock 9
    if [ ! -f "$f" ]; then
      tmp=$(mktemp -d "$dir/.pack.XXXXXX")
      (cd "$tmp" && npm pack --silent --ignore-scripts "$name@$version" > /dev/null) ||
        { rm -rf "$tmp"; echo "npm pack $name@$version failed" >&2; exit 1; }
      mv "$tmp/$name-$version.tgz" "$f"
      rm -rf "$tmp"
    fi
  ) 9> "$f.lock" || return 1
  if [ "$(_sri_sha512 "$f")" != "$integrity" ]; then
    rm -f "$f"
    echo "$name@$version does not match its pinned integrity in images/frappe/versions.json ($integrity)" >&2
    return 1
  fi
  echo "$f"
}

# The branch's Node in /usr/local (bin/node, man page, licence), npm and yarn in
# /usr/local/lib/node_modules with their links in /usr/local/bin; then each is run in the image.
install_node_toolchain() {
  local rfs=$1 node npm yarn got want
  local L=$rfs/usr/local
  node=$(npm_tarball "node-$NODE_PLATFORM" "$FRAPPE_NODE" "$FRAPPE_NODE_INTEGRITY")
  npm=$(npm_tarball npm "$NPM_VERSION" "$NPM_INTEGRITY")
  yarn=$(npm_tarball yarn "$YARN_VERSION" "$YARN_INTEGRITY")
  rm -rf "$L/lib/node_modules/npm" "$L/lib/node_modules/yarn" "$L/share/doc/node"
  mkdir -p "$L/bin" "$L/lib/node_modules/npm" "$L/lib/node_modules/yarn" "$L/share/doc/node"
  tar -xzf "$node" -C "$L" --strip-components=1 --no-same-owner package/bin/node package/share
  tar -xzf "$node" -C "$L/share/doc/node" --strip-components=1 --no-same-owner package/LICENSE
  tar -xzf "$npm" -C "$L/lib/node_modules/npm" --strip-components=1 --no-same-owner
  tar -xzf "$yarn" -C "$L/lib/node_modules/yarn" --strip-components=1 --no-same-owner
  chmod 0755 "$L/bin/node" "$L"/lib/node_modules/npm/bin/np[mx]-cli.js "$L/lib/node_modules/yarn/bin/yarn.js"
  ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$L/bin/npm"
  ln -sfn ../lib/node_modules/npm/bin/npx-cli.js "$L/bin/npx"
  ln -sfn ../lib/node_modules/yarn/bin/yarn.js "$L/bin/yarn"
  got=$(chroot_run "$rfs" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
    /bin/sh -c 'echo "$(node -v) $(npm -v) $(yarn --version)"')
  want="v$FRAPPE_NODE $NPM_VERSION $YARN_VERSION"
  [ "$got" = "$want" ] || { echo "image toolchain is '$got', expected '$want' (node npm yarn)" >&2; return 1; }
  echo "image toolchain: node $FRAPPE_NODE, npm $NPM_VERSION, yarn $YARN_VERSION"
}

# Sets CS_NODE_PATH: the Node code-server runs on in the image (the branch's when it is the
# same version, else its own copy next to code-server).
install_code_server_node() {
  local rfs=$1 tgz
  if [ "$CS_NODE" = "$FRAPPE_NODE" ]; then
    CS_NODE_PATH=/usr/local/bin/node
    return 0
  fi
  tgz=$(npm_tarball "node-$NODE_PLATFORM" "$CS_NODE" "$CS_NODE_INTEGRITY")
  mkdir -p "$rfs/usr/local/lib/code-server/bin"
  tar -xzf "$tgz" -O package/bin/node > "$rfs/usr/local/lib/code-server/bin/node"
  chmod 0755 "$rfs/usr/local/lib/code-server/bin/node"
  CS_NODE_PATH=/usr/local/lib/code-server/bin/node
}

#!/usr/bin/env bash
# Replaces the agent on a live host without Ansible: builds the agent bundle from this
# checkout, uploads it as a new release, points /opt/doppio at it, restarts the agent
# (running VMs survive: KillMode=process; queued jobs resume from SQLite) and prints
# `systemctl is-active doppio-agent`. The host must have been prepared (playbook.yml), which
# wrote the agent's configuration; this changes nothing else.
#
#   scripts/deploy-agent.sh --target root@203.0.113.10 [--port 22] [--identity KEY]
#                           [--known-hosts FILE] [--bundle FILE] [--dry-run]
#
# --dry-run prints every command it would run (the bundle is still built) and runs none.
# Host keys: trust on first use into --known-hosts (default ~/.ssh/known_hosts); a changed
# key stops it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="" PORT=22 IDENTITY="" KNOWN_HOSTS="${HOME}/.ssh/known_hosts" BUNDLE="" DRY_RUN=0
RELEASES=/opt/doppio-releases INSTALL=/opt/doppio

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET="${2:?--target needs user@host}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --identity) IDENTITY="${2:?}"; shift 2 ;;
    --known-hosts) KNOWN_HOSTS="${2:?}"; shift 2 ;;
    --bundle) BUNDLE="${2:?}"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "deploy-agent: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$TARGET" ] || { echo "deploy-agent: --target user@host is required" >&2; usage; }
case "$TARGET" in
  -*|*[!A-Za-z0-9@._:-]*) echo "deploy-agent: --target must be user@host" >&2; exit 2 ;;
esac

SSH_OPTS=(-p "$PORT" -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o "UserKnownHostsFile=$KNOWN_HOSTS")
[ -n "$IDENTITY" ] && SSH_OPTS+=(-i "$IDENTITY" -o IdentitiesOnly=yes)

run() {
  if [ "$DRY_RUN" = 1 ]; then printf '+'; printf ' %q' "$@"; printf '\n'; else "$@"; fi
}

if [ -z "$BUNDLE" ]; then
  echo "deploy-agent: building the agent bundle…" >&2
  BUNDLE="$("$ROOT/node_modules/.bin/tsx" "$ROOT/provision/bundle/build-bundle.ts" --out "$ROOT/.data/provision/bundles" \
    | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')"
fi
[ -f "$BUNDLE" ] || { echo "deploy-agent: no bundle at $BUNDLE" >&2; exit 1; }
NAME="$(basename "$BUNDLE")"
RELEASE="${NAME#doppio-agent-}"; RELEASE="${RELEASE%.tar.gz}"
case "$RELEASE" in *[!A-Za-z0-9._-]*|"") echo "deploy-agent: unexpected bundle name $NAME" >&2; exit 1 ;; esac
echo "deploy-agent: release $RELEASE → $TARGET" >&2

SCP_OPTS=("${SSH_OPTS[@]}"); SCP_OPTS[0]=-P
run scp -q "${SCP_OPTS[@]}" "$BUNDLE" "$TARGET:/tmp/$NAME"
# One remote script: unpack into its own release directory (kept if it is already there),
# switch the link, restart, wait for /health, print the unit's state.
run ssh "${SSH_OPTS[@]}" "$TARGET" "set -eu
  dir=$RELEASES/$RELEASE
  if [ ! -f \"\$dir/.complete\" ]; then
    rm -rf \"\$dir\" && mkdir -p \"\$dir\" && tar -xzf /tmp/$NAME -C \"\$dir\" && echo $RELEASE > \"\$dir/.complete\"
  fi
  rm -f /tmp/$NAME
  ln -sfn \"\$dir\" $INSTALL.new && mv -T $INSTALL.new $INSTALL
  systemctl restart doppio-agent
  for i in \$(seq 60); do curl -sf -m 2 http://127.0.0.1:8090/health >/dev/null && break; sleep 1; done
  systemctl is-active doppio-agent"

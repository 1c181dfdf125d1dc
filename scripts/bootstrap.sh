#!/usr/bin/env bash
# Idempotent host bootstrap: installs the Debian packages and npm dependencies the
# project needs, skipping what is already present. Safe to run on every `make up`/`make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages, grouped by the part that needs them.
APT_PACKAGES=(
  # control plane tests on real PostgreSQL
  postgresql
  # agent: edge proxy, VMM, host networking
  caddy qemu-system-x86 qemu-utils iproute2 nftables socat
  # images: rootfs without Docker
  mmdebstrap e2fsprogs busybox-static cpio zstd
  # images: code-server from npm built on the host (native modules, rg for @vscode/ripgrep),
  # the .vsix packer, reading the box volume in tests
  libkrb5-dev ripgrep build-essential python3 zip openssh-client
  # browser tests
  chromium
  # misc tools used by scripts and tests (strace: the agent outbox's fsync test)
  curl jq sqlite3 tmux ca-certificates strace
  # CLI tests: zsh completion script syntax and behaviour
  zsh
  # provisioning: Ansible (with ansible.posix.jsonl), its linter, and the test host
  # (systemd-nspawn of an mmdebstrap rootfs, sshd inside, apt through apt-cacher-ng)
  ansible ansible-lint systemd-container apt-cacher-ng openssh-client mmdebstrap
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: these Debian packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  echo "bootstrap: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm dependencies: reinstall only when the lockfile changed since the last install.
stamp=node_modules/.bootstrap-lock
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  echo "bootstrap: npm ci"
  npm ci --no-audit --no-fund
  cp package-lock.json "$stamp"
fi

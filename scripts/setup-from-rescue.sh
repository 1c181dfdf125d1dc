#!/usr/bin/env bash
# Installs Debian on a dedicated server booted into its provider's rescue system (Hetzner's
# installimage), then makes it a doppiobox server with provision/ansible/playbook.yml:
#
#   1. checks that the target is a rescue system (its motd says so and installimage exists);
#   2. uploads an installimage config: software RAID1 over the drives, /boot, LVM (root, swap,
#      and the agent's data volume on the rest);
#   3. runs installimage unattended (taking over the rescue system's SSH keys), reboots;
#   4. waits for SSH on the installed system (trust on first use of its new host key);
#   5. installs Python (Ansible's only need on the host) and runs playbook.yml.
#
#   scripts/setup-from-rescue.sh --target root@203.0.113.10 --hostname fc-01 \
#     [--drives sda,sdb] [--image /root/images/Debian-bookworm-amd64-base.tar.gz] \
#     [--port 22] [--identity KEY] [--known-hosts FILE] [--wait SECONDS] \
#     -- -e doppio_control_plane_url=https://boxes.example.com -e @secrets.yml ...
#
# Everything after `--` goes to ansible-playbook (the playbook's inputs).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="" PORT=22 IDENTITY="" KNOWN_HOSTS="${HOME}/.ssh/known_hosts" NAME="" DRIVES="sda,sdb"
IMAGE="/root/.oldroot/nfs/install/../images/Debian-bookworm-latest-amd64-base.tar.gz" WAIT=600
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --target) TARGET="${2:?}"; shift 2 ;;
    --hostname) NAME="${2:?}"; shift 2 ;;
    --drives) DRIVES="${2:?}"; shift 2 ;;
    --image) IMAGE="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --identity) IDENTITY="${2:?}"; shift 2 ;;
    --known-hosts) KNOWN_HOSTS="${2:?}"; shift 2 ;;
    --wait) WAIT="${2:?}"; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage 0 ;;
    *) echo "setup-from-rescue: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$TARGET" ] && [ -n "$NAME" ] || { echo "setup-from-rescue: --target and --hostname are required" >&2; usage; }
case "$TARGET" in ?*@?*) ;; *) echo "setup-from-rescue: --target must be user@host" >&2; exit 2 ;; esac
case "$TARGET" in -*|*[!A-Za-z0-9@._:-]*|*@*@*) echo "setup-from-rescue: --target must be user@host" >&2; exit 2 ;; esac
case "$NAME" in -*|*[!a-z0-9-]*) echo "setup-from-rescue: --hostname: lowercase letters, digits, hyphens" >&2; exit 2 ;; esac
case "$DRIVES" in *[!a-z0-9,]*|"") echo "setup-from-rescue: --drives like sda,sdb or nvme0n1,nvme1n1" >&2; exit 2 ;; esac
case "$IMAGE" in *[!A-Za-z0-9/._:-]*) echo "setup-from-rescue: --image must be a plain path or URL" >&2; exit 2 ;; esac
HOST="${TARGET#*@}"
log() { echo "setup-from-rescue: $*" >&2; }

# The rescue system's host key is not the installed system's: it is pinned in a file of its
# own for this run, and the installed system's key is trusted on first use into KNOWN_HOSTS.
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
ssh_to() {
  local known="$1"; shift
  ssh -p "$PORT" -o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=accept-new \
    -o "UserKnownHostsFile=$known" ${IDENTITY:+-i "$IDENTITY" -o IdentitiesOnly=yes} "$TARGET" "$@"
}

log "1/5 checking that $HOST runs a rescue system"
if ! ssh_to "$WORK/rescue_known_hosts" 'grep -qi rescue /etc/motd && command -v installimage >/dev/null'; then
  log "$HOST is not in a rescue system (its /etc/motd does not say rescue, or installimage is missing); refusing to install"
  exit 3
fi

log "2/5 uploading the installimage config (RAID1 over $DRIVES, LVM)"
{
  i=1
  for d in ${DRIVES//,/ }; do echo "DRIVE$i /dev/$d"; i=$((i + 1)); done
  echo "SWRAID 1"
  echo "SWRAIDLEVEL 1"
  echo "BOOTLOADER grub"
  echo "HOSTNAME $NAME"
  echo "PART /boot ext4 1G"
  echo "PART lvm vg0 all"
  echo "LV vg0 root / ext4 60G"
  echo "LV vg0 swap swap swap 8G"
  # Images, golden snapshots and box disks: the rest of the disks.
  echo "LV vg0 doppio /var/lib/doppio-agent ext4 all"
  echo "IMAGE $IMAGE"
} > "$WORK/installimage.conf"
ssh_to "$WORK/rescue_known_hosts" 'cat > /tmp/doppio-installimage.conf' < "$WORK/installimage.conf"

log "3/5 installing Debian with installimage, then rebooting"
ssh_to "$WORK/rescue_known_hosts" 'installimage -a -c /tmp/doppio-installimage.conf -t yes'
# The connection drops as the machine goes down.
ssh_to "$WORK/rescue_known_hosts" 'reboot' || true
sleep 5

log "4/5 waiting for SSH on the installed system (up to $WAIT s)"
if [ -f "$KNOWN_HOSTS" ]; then ssh-keygen -R "$HOST" -f "$KNOWN_HOSTS" >/dev/null 2>&1 || true; fi
deadline=$((SECONDS + WAIT))
until ssh_to "$KNOWN_HOSTS" '! grep -qi rescue /etc/motd' 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || { log "no SSH from the installed system within $WAIT s"; exit 4; }
  sleep 5
done

log "5/5 installing Python and running playbook.yml"
ssh_to "$KNOWN_HOSTS" 'command -v python3 >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-apt)'
printf '[doppio_hosts]\n%s ansible_host=%s ansible_port=%s ansible_user=%s%s\n' \
  "$NAME" "$HOST" "$PORT" "${TARGET%@*}" "${IDENTITY:+ ansible_ssh_private_key_file=$IDENTITY}" > "$WORK/inventory.ini"
ANSIBLE_CONFIG="$ROOT/provision/ansible/ansible.cfg" ansible-playbook -i "$WORK/inventory.ini" \
  "$ROOT/provision/ansible/playbook.yml" -e "doppio_known_hosts_file=$KNOWN_HOSTS" "$@"
log "done: $NAME is prepared"

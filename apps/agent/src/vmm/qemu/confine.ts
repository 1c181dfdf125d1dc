import { chmod, chown, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { poolLayout } from "../../cidr.ts";
import type { UidRange } from "../../net/firewall.ts";
import { ipToNum } from "../../net/ipv4.ts";

/**
 * Each box's QEMU runs as a uid of its own, with no capabilities and a seccomp filter, so a
 * guest that escapes into its VMM (TCG and the emulated devices are a large surface) is one
 * unprivileged user: it cannot read another box's disks or memory, signal or trace another
 * VMM, or act as root on the host.
 *
 * QEMU opens everything it needs (disks, kernel, TAP, memory file, serial log, QMP socket,
 * pid file) as root and then drops to `-runas uid:gid` just before the guest runs. What it
 * touches later is handed to it: a restore's migration stream is an inherited file
 * descriptor (`-incoming fd:3`, see process.ts), and its own disks and a hibernation's
 * socket are in the box's directory, the one directory its uid may enter (`confineBoxDir`).
 */

/** First uid (and gid) of the range boxes' VMMs run as; the Firecracker backend's starts at 200 000. */
export const VMM_UID_BASE = 300_000;

/**
 * Processes and threads a confined VMM's uid may have (RLIMIT_NPROC, per uid and so per
 * box): QEMU's own threads (a few, plus its I/O pool of up to 64) and the `socat` it runs
 * per guest connection in user mode, so a box opening connections in a loop runs out of
 * processes of its own, not the host's.
 */
export const VMM_MAX_PROCESSES = 128;

/** The file descriptor a restoring QEMU reads its migration stream from. */
export const INCOMING_FD = 3;

export interface VmmIdentity {
  uid: number;
  gid: number;
}

/**
 * The uid a box's VMM runs as: its address's offset in the box network. Addresses are
 * unique among a host's live boxes (and parked clones, whose box keeps the address), so
 * two VMMs never share a uid; a uid is reused only after its previous VMM is gone.
 */
export function vmmIdentity(ip: string, prefix: number): VmmIdentity {
  const uid = VMM_UID_BASE + (ipToNum(ip) % addresses(prefix));
  return { uid, gid: uid };
}

/** Every uid a box network's VMMs may run as (the host firewall keeps them off the network). */
export function vmmUidRange(cidr: string): UidRange {
  return { first: VMM_UID_BASE, last: VMM_UID_BASE + addresses(poolLayout(cidr).prefix) - 1 };
}

/** Addresses in a network of this prefix: one VMM uid each. */
function addresses(prefix: number): number {
  return 2 ** (32 - prefix);
}

/**
 * QEMU's options for a confined VMM. `-sandbox`: QEMU's seccomp filter, without the
 * obsolete system calls and resource control, and without spawning processes unless the
 * box needs it (user-mode networking runs `socat` per guest connection to the metadata
 * service). `elevateprivileges` stays allowed: QEMU installs the filter before its own
 * setuid to `-runas`; afterwards it holds no capability and runs with no_new_privs.
 */
export function confineArgs(id: VmmIdentity | null, spawn: boolean): string[] {
  const sandbox = ["-sandbox", `on,obsolete=deny,resourcecontrol=deny,spawn=${spawn ? "allow" : "deny"}`];
  return id ? ["-runas", `${id.uid}:${id.gid}`, ...sandbox] : sandbox;
}

/**
 * The box's directory: root's, entered by the box's group only (0710), so its VMM's uid can
 * reach its own disks (QEMU reopens an image by name when it takes write access, as after
 * a restore) and the hibernation socket, while every other box's uid finds neither its
 * disks nor its saved memory. The disks are read-write for the box's group.
 */
export async function confineBoxDir(dir: string, disks: readonly string[], id: VmmIdentity): Promise<void> {
  await chown(dir, 0, id.gid);
  await chmod(dir, 0o710);
  for (const disk of disks) {
    await chown(disk, 0, id.gid);
    await chmod(disk, 0o660);
  }
}

/**
 * The way to the boxes' directories for their VMMs' uids: the boxes directory itself 0711
 * (entered by anyone, listed by root only), and every directory above it lets others pass
 * (the search bit added where it is missing, nothing else changed: a data directory under
 * a 0700 home gets 0701). Returns the directories it changed.
 */
export async function openWayTo(boxes: string): Promise<string[]> {
  await chmod(boxes, 0o711);
  const changed: string[] = [];
  for (let dir = dirname(boxes); ; dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if ((mode & 0o001) === 0) {
      await chmod(dir, (mode & 0o7777) | 0o001);
      changed.push(dir);
    }
    if (dir === dirname(dir)) return changed;
  }
}

/**
 * A socket the VMM connects to (a hibernation's stream): connectable by the group of its
 * directory, the box's (`confineBoxDir`; root's for a VMM that is not confined).
 */
export async function confineSocket(socket: string, dir: string): Promise<void> {
  await chown(socket, 0, (await stat(dir)).gid);
  await chmod(socket, 0o660);
}

import { z } from "zod";

/**
 * Ansible plays the control plane runs against a host (provision/ansible/): what an admin
 * may start, the statuses a play and its tasks go through, and what the API answers.
 */

/** What an admin may run on a server: Prepare server, Deploy agent. */
export const PLAY_KINDS = ["prepare", "deploy_agent"] as const;
export type PlayKind = (typeof PLAY_KINDS)[number];

/** The playbook (in provision/ansible/) each one runs. */
export const PLAYBOOKS: Record<PlayKind, string> = {
  /** Everything: a bare Debian host becomes a server. */
  prepare: "playbook.yml",
  /** Only the agent: upload, restart, wait for /health and a heartbeat. */
  deploy_agent: "deploy-agent.yml",
};

export const PLAY_STATUSES = ["pending", "running", "success", "failure", "cancelled"] as const;
export type PlayStatus = (typeof PLAY_STATUSES)[number];
export const ACTIVE_PLAY_STATUSES: readonly PlayStatus[] = ["pending", "running"];

/**
 * pending: not started (yet, or never: the play ended before it); running: started, no result;
 * ok/changed/skipped/failed/unreachable/ignored: Ansible's result for the host (ignored: failed
 * under ignore_errors); cancelled: running when the play was stopped.
 */
export const TASK_STATUSES = [
  "pending",
  "running",
  "ok",
  "changed",
  "skipped",
  "failed",
  "unreachable",
  "ignored",
  "cancelled",
] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

/** Ansible's per-host stats, summed over the play's hosts (one here). */
export const PlayCounters = z.object({
  ok: z.number().int(),
  changed: z.number().int(),
  failed: z.number().int(),
  skipped: z.number().int(),
  unreachable: z.number().int(),
  rescued: z.number().int(),
  ignored: z.number().int(),
});
export type PlayCounters = z.infer<typeof PlayCounters>;

/**
 * The few inputs an admin may set for one play; everything else comes from the server's
 * record. A closed list: an arbitrary extra var could point Ansible anywhere (even at the
 * control plane's own machine with `ansible_connection=local`).
 */
export const PlayVariables = z.strictObject({
  /** Run QEMU by software emulation when the host has no usable KVM (slow; trials only). */
  allowTcg: z.boolean().optional(),
  /** `tap` (bridge + TAP per box, production) or `user` (QEMU user networking). */
  networkMode: z.enum(["tap", "user"]).optional(),
  acmeEmail: z.string().email().max(200).optional(),
});
export type PlayVariables = z.infer<typeof PlayVariables>;

export const StartPlayRequest = z.strictObject({
  playbook: z.enum(PLAY_KINDS),
  variables: PlayVariables.default({}),
});
export type StartPlayRequest = z.infer<typeof StartPlayRequest>;

export const AnsibleTask = z.object({
  id: z.string(),
  position: z.number().int(),
  name: z.string(),
  role: z.string().nullable(),
  handler: z.boolean(),
  status: z.enum(TASK_STATUSES),
  startedAt: z.string().nullable(),
  endedAt: z.string().nullable(),
  durationMs: z.number().int().nullable(),
  output: z.string().nullable(),
  error: z.string().nullable(),
});
export type AnsibleTask = z.infer<typeof AnsibleTask>;

export const AnsiblePlay = z.object({
  id: z.string(),
  server: z.string(),
  playbook: z.enum(PLAY_KINDS),
  status: z.enum(PLAY_STATUSES),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  endedAt: z.string().nullable(),
  durationMs: z.number().int().nullable(),
  /** The play's inputs, each secret replaced by "[redacted]". */
  variables: z.record(z.string(), z.unknown()),
  counters: PlayCounters,
  /** Tasks finished (any result) out of the tasks known so far. */
  progress: z.object({ done: z.number().int(), total: z.number().int() }),
  error: z.string().nullable(),
});
export type AnsiblePlay = z.infer<typeof AnsiblePlay>;
export const AnsiblePlayWithTasks = AnsiblePlay.extend({ tasks: z.array(AnsibleTask) });
export type AnsiblePlayWithTasks = z.infer<typeof AnsiblePlayWithTasks>;
export const AnsiblePlayList = z.object({ plays: z.array(AnsiblePlay) });

/** How the control plane reaches a host over SSH, and the host keys it pinned on first contact. */
const SshHost = z
  .string()
  .min(1)
  .max(253, { abort: true })
  .regex(/^[A-Za-z0-9][A-Za-z0-9.:-]*$/, "a host name or IP address");
export const ServerSshRequest = z.strictObject({
  host: SshHost,
  port: z.number().int().min(1).max(65535).default(22),
  user: z
    .string()
    .min(1)
    .max(32, { abort: true })
    .regex(/^[a-z_][a-z0-9_-]*$/, "a Unix user name"),
  /** The control-plane URL the host's agent calls; the control plane's public URL when unset. */
  controlPlaneUrl: z.string().url().max(500).optional(),
});
export type ServerSshRequest = z.infer<typeof ServerSshRequest>;
export const ServerSsh = z.object({
  host: z.string(),
  port: z.number().int(),
  user: z.string(),
  controlPlaneUrl: z.string().nullable(),
  /** known_hosts lines recorded on first contact; null until then. */
  hostKeys: z.string().nullable(),
});
export type ServerSsh = z.infer<typeof ServerSsh>;
/** A server's SSH address, or null while none is set (a server registered by `make up`). */
export const ServerSshState = z.object({ ssh: ServerSsh.nullable() });

/** The control plane's own SSH key: install the public half on a host before preparing it. */
export const ControlPlaneSshKey = z.object({ publicKey: z.string(), fingerprint: z.string() });

export const PlayIdParams = z.object({ id: z.string().uuid() });

/** Events of a play's stream: the play (counters, progress, status) and each task change. */
export const PlayStreamEvents = { play: AnsiblePlay, task: AnsibleTask };

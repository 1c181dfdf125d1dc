import type { BoxEnv, GoldenStatus, StepName, VmState } from "@doppio/contracts";

/**
 * What a guest learns about itself before its first instruction after restore (QEMU:
 * fw_cfg padded to METADATA_SIZE; Firecracker: MMDS under latest/meta-data/devbox).
 * The guest's init applies it: address, MAC, hostname, env, clock, fresh secrets.
 */
export interface BoxMetadata {
  slug: string;
  site_url: string;
  code_url: string;
  env: BoxEnv;
  /** GitHub `owner/name` the guest clones into its workspace on first start; "" or absent: none. */
  repo?: string;
  /**
   * GitHub's web origin (`http(s)://host[:port]`, contracts' GitHubWebUrl): the guest's
   * credential helper answers for it alone and doppio-clone clones from it. Absent: github.com.
   */
  github_url?: string;
  /** The owner's git commit author (contracts' GitAuthor): the guest's system gitconfig `[user]`. */
  git_author?: { name: string; email: string };
  network: { ip: string; prefix: number; gateway: string; mac: string; dns: string[] };
  /** The agent's metadata service as the guest reaches it (`http://<gateway>:<port>`); "" when off. */
  metadata_url: string;
  secrets: BoxSecrets & {
    /**
     * Bearer for `metadata_url`, new on every boot/restore; the agent keeps only its sha256.
     * "" when the metadata service is off.
     */
    metadata_token: string;
  };
  /** Wall clock at issue time (ms since epoch); the guest sets its clock from it. */
  issued_at: number;
  /**
   * Bumped on every boot/restore so the guest knows to re-apply. 0 is reserved for the
   * golden build (its guest does not mount the data volume); boxes always get 1 or more.
   */
  generation: number;
  /**
   * A parked clone of the warm pool (pool/warm.ts): after applying this, the guest waits at
   * the metadata service (`GET /v1/parked/identity`) for the box that claims it. Boxes never
   * carry it.
   */
  parked?: true;
}

/** Fresh per clone: never shared between clones of one golden snapshot; kept for the box's life. */
export interface BoxSecrets {
  machine_id: string;
  seed: string;
  db_password: string;
  encryption_key: string;
  admin_password: string;
}

/** Fixed size the metadata blob is padded to; one limit with the control plane's env budget. */
export { METADATA_SIZE } from "@doppio/contracts";

export interface VmSpec {
  slug: string;
  template: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  /** Host network attachment chosen by the agent (TAP on a bridge, or user-mode). */
  net: { ip: string; prefix: number; gateway: string; mac: string; tap: string | null };
  metadata: BoxMetadata;
}

export interface TemplateSpec {
  name: string;
  /** The control plane's template version: what the heartbeat reports and placement compares. */
  version: string;
  /**
   * The image-store version the golden is built from (`<imagesDir>/<name>/<imageVersion>`):
   * the store's current build, or `version` for images laid out by scripts/build-image.sh.
   */
  imageVersion: string;
  /** Guest ports that must answer before the box (or golden VM) counts as ready. */
  readyPorts: number[];
  memoryMb: number;
  vcpu: number;
}

export interface GoldenInfo {
  template: string;
  version: string;
  status: GoldenStatus;
  builtAt: string | null;
  error: string | null;
  /** Image version the current golden build was made from (null: none, or not recorded). */
  imageVersion: string | null;
}

/** Where the edge reaches a guest port: `host:port`, or null if that port is not reachable. */
export type Upstream = (guestPort: number) => string | null;

/** Progress reporting from inside an executor action; each step is timed by the caller. */
export interface StepReporter {
  /** `note`: what the step's value means for the job, kept as the succeeded step's detail. */
  step<T>(name: StepName, fn: () => Promise<T>, note?: (value: T) => string | undefined): Promise<T>;
  log(line: string): void;
  /**
   * A point inside a step (e.g. `qemu_up`, `cont`, or a guest marker seen on the console,
   * `guest_<name>`): benches time the phases of a restore with it; jobs ignore it.
   */
  mark?(event: string): void;
}

/**
 * One VMM backend. Every method first checks the host's real state, so running an
 * action twice (after an agent crash) is harmless. That check is not a reported step: the
 * job handler reports its own `check_state` before it calls the executor.
 */
export interface Executor {
  readonly backend: "qemu" | "firecracker";
  /**
   * Restore a new box from the template's golden snapshot (copy-on-write disks). The
   * restored VM keeps the golden build's memory size and vCPUs (a snapshot fixes them);
   * `spec.memoryMb`/`vcpu` apply to cold boots.
   */
  createFromGolden(spec: VmSpec, report: StepReporter): Promise<Upstream>;
  /**
   * Warm pool (pool/warm.ts): hands the running parked clone `parked` (made by
   * createFromGolden under its pool slug) to box `spec.slug` without restarting it: its
   * directory and records take the box's name, `deliver` gives the guest `spec.metadata`
   * (through the metadata service, which the guest long-polls), and the guest applies it as
   * after a restore; resolves once it reports ready with that generation. Running it again
   * (after an agent restart) continues the hand-over. Absent: the backend has no warm pool.
   */
  claimParked?(
    parked: string,
    spec: VmSpec,
    deliver: (meta: BoxMetadata) => void,
    report: StepReporter,
  ): Promise<Upstream>;
  /** Cold-boot a new box from the template image (fallback for the default template). */
  createColdBoot(spec: VmSpec, report: StepReporter): Promise<Upstream>;
  /** Cold-boot an existing box from its overlay + volume, or resume it if it is hibernated. */
  start(spec: VmSpec, report: StepReporter): Promise<Upstream>;
  /** Kill the VMM; keep overlay and volume; discard saved memory if the box is hibernated. */
  stop(slug: string, report: StepReporter): Promise<void>;
  /**
   * Save the running box's memory and device state to a file in its directory (complete
   * or absent, never partial), then end the VMM. `start` resumes from it (same address,
   * disks and routes; the guest's clock is set again) and consumes it; `stop` discards it.
   * A box already hibernated answers with its file as is.
   */
  hibernate(slug: string, report: StepReporter): Promise<{ memoryFileBytes: number }>;
  /** Bytes of the box's saved memory on the host, or null when it has none. */
  memoryFileBytes(slug: string): Promise<number | null>;
  /** Remove every artifact of the box: overlay, volume, snapshot dir, serial log, socket. */
  remove(slug: string, report: StepReporter): Promise<void>;
  /** Rebuild from golden keeping identity; leaves the box running. */
  reset(spec: VmSpec, report: StepReporter): Promise<Upstream>;
  inspect(slug: string): Promise<VmState>;
  /**
   * Host path of the box's serial console log: the guest's console and its services'
   * `[svc NAME]` lines, appended while the VM runs, kept across stop/start.
   */
  serialLogPath(slug: string): string | null;
  /** Every box with artifacts on this host. */
  list(): Promise<Array<{ slug: string; state: VmState }>>;
  /**
   * Lets the box's guest run again if its VMM paused it on a disk write error: QEMU pauses a
   * guest whose write met ENOSPC (its default `werror=enospc`) and keeps it paused after
   * space is freed. True if it was paused so and now runs; a write that still finds no space
   * pauses it again. Absent: the backend never pauses a guest on its own.
   */
  resumeIfIoPaused?(slug: string): Promise<boolean>;
  /** Upstream of a running box (after an agent restart), or null if not running. */
  upstream(slug: string): Promise<Upstream | null>;
  buildGolden(template: TemplateSpec, report: StepReporter): Promise<GoldenInfo>;
  goldenStatus(template: string): Promise<GoldenInfo>;
  /** Release host resources the executor holds (QMP sockets, timers). Does not stop VMs. */
  close(): Promise<void>;
}

/**
 * Host side of a VM's network (spec page 05 §2). Executors create the TAP before the
 * VMM opens it and remove it on stop; every method tolerates "already done".
 */
/** The only source addresses a box's TAP may send with. */
export interface GuestAddress {
  ip: string;
  mac: string;
}

export interface HostNetwork {
  /**
   * Bridge with the gateway address, NAT and the box-isolation firewall, rewritten whole
   * (the agent calls it at start and on every reconcile, which repairs changed rules).
   */
  ensureBridge(): Promise<void>;
  /** An isolated TAP on the bridge that may send only with the guest's MAC and IP. */
  createTap(tap: string, guest: GuestAddress): Promise<void>;
  removeTap(tap: string): Promise<void>;
  /** TAPs this agent owns (by name prefix), for reconcile. */
  listTaps(): Promise<string[]>;
  /** Removes every TAP, the firewall and the bridge. */
  teardown(): Promise<void>;
}

/** What a backend module builds for main.ts: the executor and, in tap mode, the host network. */
export interface Backend {
  executor: Executor;
  network: HostNetwork | null;
}

import { randomBytes } from "node:crypto";
import { BOX_SIZES, findTemplate } from "@doppio/contracts";
import type { Logger } from "pino";
import type { Clock } from "../clock.ts";
import type { AgentConfig } from "../config.ts";
import { freshSecrets } from "../jobs/handlers/common.ts";
import { metadataUrl, newMetadataToken } from "../metadata/tokens.ts";
import { macForIp, tapNameForIp } from "../net/naming.ts";
import type { IpPool } from "../store/ip-pool.ts";
import type { BoxMetadata, Executor, StepReporter, VmSpec } from "../vmm/executor.ts";
import type { ParkedStore, ParkedVm } from "./parked.ts";

/** A parked clone's first (and only) boot generation; its claim gives the box the next one. */
const PARKED_GENERATION = 1;
/**
 * A claim's refill starts this long after the hand-over: a clone's restore (disks, network,
 * QEMU) would otherwise run beside the rest of the create it served (its result, the control
 * plane's update of the box).
 */
const CLAIM_REFILL_DELAY_MS = 500;
/** How long one `GET /v1/parked/identity` waits before answering 204 (the guest asks again). */
export const IDENTITY_POLL_MS = 20_000;

export interface WarmPoolDeps {
  config: AgentConfig;
  executor: Executor;
  ipPool: IpPool;
  parked: ParkedStore;
  clock: Clock;
  log: Logger;
  /** Steps of pool fills go to the log only (no job owns them). */
  report: StepReporter;
}

export interface PoolState {
  template: string;
  target: number;
  ready: number;
  filling: number;
  /** What one clone of the template takes on this host: its data volume and guest memory. */
  diskGb: number;
  memoryMb: number;
}

/**
 * The warm pool: per template, `target` clones restored from the golden snapshot ahead of
 * demand, each under a pool slug (`pool-<hex>`, never a box's), with its address, TAP and
 * data volume, and a parked identity whose only use is to wait at the metadata service for
 * the box that claims it (`GET /v1/parked/identity`). A create takes one with `claim` (one
 * SQLite transaction, so a clone is handed out once), the executor moves it to the box's
 * name (`claimParked`), and `deliver` answers the guest's wait with the box's metadata. A
 * clone is never returned to the pool: whatever happens to a claim, the clone is either the
 * box's or removed. Passes (retire the surplus, then fill) run one at a time in the
 * background: at start, shortly after every claim (CLAIM_REFILL_DELAY_MS) and with every
 * heartbeat answer's sizes.
 */
export class WarmPool {
  readonly #d: WarmPoolDeps;
  readonly #log: Logger;
  #targets: Record<string, number>;
  /** Identities handed over but maybe not yet fetched, and the guests waiting for theirs. */
  readonly #mail = new Map<
    string,
    { meta: BoxMetadata | null; waiters: Set<(m: BoxMetadata | null) => void> }
  >();
  #fill: Promise<void> | null = null;
  #again = false;
  #closed = false;
  /** After a failed fill: the next try (doubling from 5 s to 5 min), so a busy host does not end the pool. */
  #retry: NodeJS.Timeout | null = null;
  #retryMs = 5_000;
  /** The refill after a claim, waiting out CLAIM_REFILL_DELAY_MS. */
  #soon: { timer: NodeJS.Timeout; done: Promise<void>; fire: () => void } | null = null;

  constructor(d: WarmPoolDeps) {
    this.#d = d;
    this.#log = d.log.child({ component: "warm-pool" });
    this.#targets = { ...d.config.warmPool.sizes };
  }

  /** Whether this host can run a pool at all (the guest needs the metadata service). */
  get enabled(): boolean {
    return this.#d.config.metadata.enabled && typeof this.#d.executor.claimParked === "function";
  }

  /**
   * Pool sizes per template (the control plane's settings replace the configured ones), with
   * every heartbeat answer: each one also starts a pass that fills a pool short of its size
   * (a clone may have gone outside the pool's doing, e.g. reconcile removed an orphan) and
   * retires the surplus of one over it. Unchanged sizes wait for a pending retry after a
   * failed fill (its backoff stands); changed ones start the pass at once.
   */
  setTargets(targets: Record<string, number>): void {
    const changed = JSON.stringify(targets) !== JSON.stringify(this.#targets);
    this.#targets = { ...targets };
    if (changed || !this.#retry) this.refill();
  }

  state(): PoolState[] {
    const counts = this.#d.parked.counts();
    const names = new Set([...Object.keys(this.#targets), ...counts.keys()]);
    return [...names].sort().map((template) => ({
      template,
      target: this.#targets[template] ?? 0,
      ready: counts.get(template)?.ready ?? 0,
      filling: counts.get(template)?.filling ?? 0,
      diskGb: this.#diskGb(template),
      memoryMb: this.#template(template)?.memoryMb ?? 0,
    }));
  }

  #template(name: string): AgentConfig["templates"][number] | undefined {
    return this.#d.config.templates.find((t) => t.name === name);
  }

  /** The data volume of the template's clones: the template's default box size's, unless configured. */
  #diskGb(template: string): number {
    return this.#d.config.warmPool.diskGb ?? BOX_SIZES[findTemplate(template)?.boxSize ?? "small"].diskGb;
  }

  /** Slugs the pool owns (reconcile must not take their VMs, TAPs or addresses for orphans). */
  slugs(): Set<string> {
    return new Set(this.#d.parked.all().map((p) => p.slug));
  }

  /**
   * At start: clones a dead agent was still making or retiring are removed, ready ones whose
   * VM is gone too; ready clones still running are adopted. Claimed ones are left to their create job,
   * which runs again after a restart and continues the hand-over.
   */
  async adopt(): Promise<void> {
    for (const p of this.#d.parked.all()) {
      if (p.state === "claimed") continue;
      const state = await this.#d.executor.inspect(p.slug).catch(() => "gone" as const);
      if (p.state === "ready" && state === "running") continue;
      this.#log.warn(
        { slug: p.slug, was: p.state, vm: state },
        "discarding a pool clone left by the last run",
      );
      await this.discard(p.slug);
    }
  }

  /** Starts a background fill (or asks the running one to look again when it ends). */
  refill(): void {
    this.#soon?.fire();
    if (this.#closed || !this.enabled) return;
    if (this.#fill) {
      this.#again = true;
      return;
    }
    this.#fill = (async () => {
      do {
        this.#again = false;
        await this.#fillOnce();
      } while (this.#again && !this.#closed);
    })()
      .catch((err: unknown) => this.#log.error({ err }, "warm pool fill failed"))
      .finally(() => {
        this.#fill = null;
      });
  }

  /** Resolves when no fill is running or waiting to start after a claim (tests, benches). */
  async idle(): Promise<void> {
    while (this.#fill || this.#soon) {
      await this.#soon?.done;
      await this.#fill;
    }
  }

  #refillSoon(): void {
    if (this.#soon || this.#closed) return;
    let fire = () => {};
    const done = new Promise<void>((resolve) => {
      fire = () => {
        clearTimeout(timer);
        this.#soon = null;
        this.refill();
        resolve();
      };
    });
    const timer = setTimeout(() => fire(), CLAIM_REFILL_DELAY_MS);
    timer.unref();
    this.#soon = { timer, done, fire };
  }

  /** A ready clone of the template and disk size for `box`, now claimed; null when none. */
  claim(template: string, diskGb: number, box: string): ParkedVm | null {
    if (!this.enabled) return null;
    const p = this.#d.parked.claim(template, diskGb, box);
    if (p) this.#log.info({ slug: p.slug, box }, "pool clone claimed");
    return p;
  }

  claimedFor(box: string): ParkedVm | null {
    return this.#d.parked.claimedFor(box);
  }

  /** Gives the claimed clone its box's identity: answers its guest's wait, now or at its next ask. */
  deliver(slug: string, meta: BoxMetadata): void {
    const box = this.#d.parked.get(slug);
    if (box?.state !== "claimed") throw new Error(`pool clone ${slug} is not claimed`);
    const entry = this.#mail.get(slug) ?? { meta: null, waiters: new Set() };
    entry.meta = meta;
    this.#mail.set(slug, entry);
    for (const w of entry.waiters) w(meta);
    entry.waiters.clear();
  }

  /** The metadata service's side: the clone a bearer belongs to, and its address. */
  byToken(sha256: string): { slug: string; ip: string | null } | null {
    const p = this.#d.parked.byToken(sha256);
    return p ? { slug: p.slug, ip: p.ip } : null;
  }

  /** Waits up to `ms` for the identity handed to clone `slug`; null when none came. */
  waitForIdentity(slug: string, ms: number, signal?: AbortSignal): Promise<BoxMetadata | null> {
    const entry = this.#mail.get(slug) ?? { meta: null, waiters: new Set() };
    this.#mail.set(slug, entry);
    if (entry.meta) return Promise.resolve(entry.meta);
    return new Promise((resolve) => {
      const done = (m: BoxMetadata | null) => {
        clearTimeout(timer);
        entry.waiters.delete(waiter);
        resolve(m);
      };
      const waiter = (m: BoxMetadata | null) => done(m);
      const timer = setTimeout(() => done(null), ms);
      entry.waiters.add(waiter);
      signal?.addEventListener("abort", () => done(null), { once: true });
    });
  }

  /** The clone is the box's now: its pool record and its parked bearer are gone. */
  handedOver(slug: string): void {
    this.#d.parked.remove(slug);
    this.#endWaits(slug);
    this.#refillSoon();
  }

  /** Removes a clone's VM (under its pool slug), its record and its address. */
  async discard(slug: string): Promise<void> {
    if ((await this.#d.executor.inspect(slug).catch(() => "gone" as const)) !== "gone") {
      await this.#d.executor.remove(slug, this.#d.report);
    }
    this.#d.parked.remove(slug);
    this.#endWaits(slug);
  }

  /**
   * Forgets clone `slug`'s mail and answers its guest's waits with nothing: a clone that is
   * gone never answers its long-poll, whose handler would otherwise hold the metadata
   * service (and its close) until the poll's time ran out.
   */
  #endWaits(slug: string): void {
    const entry = this.#mail.get(slug);
    this.#mail.delete(slug);
    for (const w of [...(entry?.waiters ?? [])]) w(null);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#retry) clearTimeout(this.#retry);
    this.#soon?.fire();
    // Parked guests waiting now get their 204 at once (and ask the next agent).
    for (const slug of [...this.#mail.keys()]) this.#endWaits(slug);
    await this.idle();
  }

  async #fillOnce(): Promise<void> {
    if (!(await this.#trim())) this.#retryLater();
    for (const t of this.#d.config.templates) {
      const diskGb = this.#diskGb(t.name);
      for (;;) {
        if (this.#closed) return;
        const target = this.#targets[t.name] ?? 0;
        const c = this.#d.parked.counts().get(t.name) ?? { ready: 0, filling: 0 };
        if (c.ready + c.filling >= target) break;
        const golden = await this.#d.executor.goldenStatus(t.name);
        if (golden.status !== "ready") break;
        if (!(await this.#makeOne(t, diskGb))) {
          this.#retryLater();
          break;
        }
        this.#retryMs = 5_000;
      }
    }
  }

  /**
   * Retires surplus clones (the size was lowered, or the template or its disk size changed):
   * each is first moved to `retiring` in one transaction, so a create racing the shrink
   * either claimed it before (and it is not surplus) or does not find it (and claims another
   * or restores from the golden); then its VM, TAP, firewall element, volume and address go.
   * False when a removal failed (the row stays `retiring`; the next pass or a restart retries).
   */
  async #trim(): Promise<boolean> {
    const names = new Set([
      ...this.#d.config.templates.map((t) => t.name),
      ...Object.keys(this.#targets),
      ...this.#d.parked.counts().keys(),
    ]);
    for (const template of names) {
      while (this.#d.parked.takeSurplus(template, this.#diskGb(template), this.#targets[template] ?? 0));
    }
    let ok = true;
    for (const p of this.#d.parked.all()) {
      if (p.state !== "retiring" || this.#closed) continue;
      try {
        await this.discard(p.slug);
        this.#log.info({ slug: p.slug, template: p.template }, "surplus pool clone retired");
      } catch (err) {
        this.#log.error({ err, slug: p.slug }, "retiring a pool clone failed");
        ok = false;
      }
    }
    return ok;
  }

  #retryLater(): void {
    if (this.#retry || this.#closed) return;
    this.#retry = setTimeout(() => {
      this.#retry = null;
      this.refill();
    }, this.#retryMs);
    this.#retry.unref();
    this.#retryMs = Math.min(this.#retryMs * 2, 300_000);
  }

  async #makeOne(t: AgentConfig["templates"][number], diskGb: number): Promise<boolean> {
    const { config, ipPool } = this.#d;
    const slug = `pool-${randomBytes(5).toString("hex")}`;
    const started = Date.now();
    try {
      const ip = this.#d.parked.insertFilling({
        slug,
        template: t.name,
        diskGb,
        generation: PARKED_GENERATION,
      });
      const issued = newMetadataToken();
      this.#d.parked.setToken(slug, issued.sha256);
      const net = { ip, prefix: ipPool.layout.prefix, gateway: ipPool.gateway(), mac: macForIp(ip) };
      const spec: VmSpec = {
        slug,
        template: t.name,
        vcpu: t.vcpu,
        memoryMb: t.memoryMb,
        diskGb,
        net: { ...net, tap: config.networkMode === "tap" ? tapNameForIp(ip) : null },
        metadata: {
          slug,
          site_url: "",
          code_url: "",
          env: {},
          network: { ...net, dns: config.dns },
          metadata_url: metadataUrl(config, net.gateway),
          secrets: { ...freshSecrets(), metadata_token: issued.token },
          issued_at: this.#d.clock.now().getTime(),
          generation: PARKED_GENERATION,
          parked: true,
        },
      };
      await this.#d.executor.createFromGolden(spec, this.#d.report);
      this.#d.parked.markReady(slug);
      this.#log.info({ slug, template: t.name, ms: Date.now() - started }, "pool clone ready");
      return true;
    } catch (err) {
      this.#log.error({ err, slug, template: t.name }, "making a pool clone failed");
      await this.discard(slug).catch((e: unknown) =>
        this.#log.error({ err: e, slug }, "removing a failed pool clone failed"),
      );
      return false;
    }
  }
}

/** The body of `GET /v1/parked/identity`: compact JSON, `generation` first (the guest reads it first). */
export function encodeIdentity(meta: BoxMetadata): string {
  const { generation, ...rest } = meta;
  return JSON.stringify({ generation, ...rest });
}

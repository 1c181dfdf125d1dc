import type { VmState } from "@doppio/contracts";
import type { Logger } from "pino";
import { publishHibernated, publishRunning, publishStopped, vmSpec } from "../jobs/handlers/common.ts";
import type { HandlerDeps } from "../jobs/registry.ts";
import type { JobRunner } from "../jobs/runner.ts";
import type { Metrics } from "../metrics.ts";
import { tapNameForIp } from "../net/naming.ts";
import type { StepReporter } from "../vmm/executor.ts";
import { BackgroundLoop } from "./background-loop.ts";

export type ReconcileAction =
  | { kind: "restarted"; slug: string }
  | { kind: "route_restored"; slug: string }
  | { kind: "resumed_io_paused"; slug: string }
  | { kind: "removed_vm"; slug: string }
  | { kind: "freed_ip"; slug: string; ip: string }
  | { kind: "removed_tap"; tap: string }
  | { kind: "edge_reloaded" }
  | { kind: "failed"; what: string; error: string };

/** One pass: host-wide actions before and after the per-box corrections it began. */
interface Pass {
  before: ReconcileAction[];
  boxes: Array<Promise<ReconcileAction | null>>;
  after: ReconcileAction[];
}

export type BoxCorrection = "start" | "publish_running" | "publish_stopped" | null;

/**
 * What one box needs, from its desired state, what the VMM reports and its current route.
 * "gone" means no disks: nothing to boot from (a create that failed early); that box shows
 * as error at the control plane and waits for the user. A running box that should be stopped
 * is left to its stop job (reconcile never kills a VM the user may be using).
 */
export function boxCorrection(
  desired: "running" | "stopped",
  state: VmState,
  route: "running" | "stopped" | "hibernated" | undefined,
): BoxCorrection {
  if (desired === "running" && (state === "exited" || state === "stopped" || state === "hibernated"))
    return "start";
  if (desired === "running" && state === "running" && route !== "running") return "publish_running";
  if (desired === "stopped" && route === undefined) return "publish_stopped";
  return null;
}

export interface ReconcileDeps {
  handlers: HandlerDeps;
  runner: JobRunner;
  metrics: Metrics;
  log: Logger;
  report: StepReporter;
  /** Slugs the control plane placed here (last heartbeat); null when not known yet. */
  expected: () => string[] | null;
  /** The warm pool's clones are nobody's box but not orphans either (its own records clean them). */
  pool?: { slugs(): Set<string> } | null;
  /** Keeps Caddy on the agent's config (edge helper's EdgeConfigKeeper); absent without an edge. */
  edge: { ensureConfig(): Promise<"unchanged" | "loaded"> } | null;
  /** Time between passes when nothing wakes the loop. */
  intervalMs: number;
}

/**
 * Steers the host toward the recorded intent: boxes that should run are running (a guest
 * paused on a disk write error runs again) and routed;
 * VMs, addresses and TAPs that belong to no box go away; Caddy carries our config. Each
 * correction is one small idempotent action, and per-box work joins the box's job queue.
 */
export class Reconciler extends BackgroundLoop {
  #inflight: Promise<Pass> | null = null;
  /** Per-box corrections still running: a restart lasts a guest's whole boot. */
  readonly #corrections = new Set<Promise<ReconcileAction | null>>();

  constructor(private readonly d: ReconcileDeps) {
    super();
  }

  /** Runs one pass (concurrent callers share it) and waits for the per-box corrections it began. */
  async reconcileOnce(): Promise<ReconcileAction[]> {
    const pass = await this.#sharedPass();
    const boxes = (await Promise.all(pass.boxes)).filter((a) => a !== null);
    return [...pass.before, ...boxes, ...pass.after];
  }

  protected run(signal: AbortSignal): Promise<void> {
    // The loop does not wait for per-box corrections: a box restarting (a boot, up to minutes
    // under TCG) must not hold back the next pass, which resumes a guest paused on a full
    // disk or restores a route on another box. A box still being corrected is busy, and skipped.
    return this.repeat(signal, {
      intervalMs: this.d.intervalMs,
      retryMs: () => this.d.intervalMs,
      pass: () => this.#sharedPass(),
      failed: (err) => this.d.log.error({ err }, "reconcile pass failed"),
    });
  }

  override async stop(): Promise<void> {
    await super.stop();
    await this.#inflight;
    await Promise.all(this.#corrections);
  }

  #sharedPass(): Promise<Pass> {
    this.#inflight ??= this.#pass().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  /** Starts one box's correction in its queue; it counts and logs itself when it ends. */
  #correct(slug: string, fn: () => Promise<ReconcileAction | null>): Promise<ReconcileAction | null> {
    const work = this.d.runner.runForBox(slug, fn).then(
      (a) => {
        if (a) this.d.metrics.reconcileActions.inc({ action: a.kind });
        return a;
      },
      (err: unknown) => {
        this.d.log.warn({ err, what: `box ${slug}` }, "reconcile action failed");
        this.d.metrics.reconcileActions.inc({ action: "failed" });
        const error = err instanceof Error ? err.message : String(err);
        return { kind: "failed", what: `box ${slug}`, error } as const;
      },
    );
    this.#corrections.add(work);
    void work.finally(() => this.#corrections.delete(work));
    return work;
  }

  async #pass(): Promise<Pass> {
    const h = this.d.handlers;
    const actions: ReconcileAction[] = [];
    const attempt = async (what: string, fn: () => Promise<ReconcileAction | null>) => {
      try {
        const a = await fn();
        if (a) actions.push(a);
      } catch (err) {
        actions.push({ kind: "failed", what, error: err instanceof Error ? err.message : String(err) });
        this.d.log.warn({ err, what }, "reconcile action failed");
      }
    };

    // The isolation firewall is rewritten whole, so a rule someone removed comes back.
    const network = h.network;
    if (network) {
      await attempt("firewall", async () => {
        await network.ensureBridge();
        return null;
      });
    }
    const before = actions.splice(0);

    const boxes: Array<Promise<ReconcileAction | null>> = [];
    for (const box of h.boxes.all()) {
      if (this.d.runner.busy(box.slug)) continue;
      boxes.push(
        this.#correct(box.slug, async () => {
          const current = h.boxes.get(box.slug);
          if (!current) return null;
          const state = await h.executor.inspect(box.slug);
          // A guest paused on a full disk stays paused after the disk is freed (QEMU).
          if (
            current.desiredState === "running" &&
            state === "running" &&
            (await h.executor.resumeIfIoPaused?.(box.slug))
          ) {
            this.d.log.warn({ slug: box.slug }, "box was paused on a disk write error; resumed it");
            return { kind: "resumed_io_paused", slug: box.slug };
          }
          const route = h.routes.get(box.slug);
          switch (boxCorrection(current.desiredState, state, route?.state)) {
            case "start": {
              const spec = vmSpec(h, current, h.boxes.bumpGeneration(box.slug));
              const upstream = await h.executor.start(spec, this.d.report);
              publishRunning(h, box.slug, current.spec, upstream);
              this.d.log.warn(
                { slug: box.slug, was: state },
                "box should run but its VMM was not running; started it",
              );
              return { kind: "restarted", slug: box.slug };
            }
            case "publish_running": {
              const upstream = await h.executor.upstream(box.slug);
              if (!upstream) return null;
              publishRunning(h, box.slug, current.spec, upstream);
              return { kind: "route_restored", slug: box.slug };
            }
            case "publish_stopped":
              if (state === "hibernated") publishHibernated(h, box.slug, current.spec);
              else publishStopped(h, box.slug, current.spec);
              return { kind: "route_restored", slug: box.slug };
            case null:
              return null;
          }
        }),
      );
    }

    // Orphans: only when nothing is in flight, because a running job (a create mid-way, a
    // golden build) owns resources that are not recorded yet.
    if (this.d.runner.heldCount() === 0) {
      const parked = this.d.pool?.slugs() ?? new Set<string>();
      const known = new Set([...h.boxes.all().map((b) => b.slug), ...parked]);
      const expected = new Set(this.d.expected() ?? []);
      for (const vm of await h.executor.list()) {
        if (known.has(vm.slug) || expected.has(vm.slug) || this.d.runner.busy(vm.slug)) continue;
        await attempt(`vm ${vm.slug}`, async () => {
          await h.executor.remove(vm.slug, this.d.report);
          this.d.log.warn({ slug: vm.slug, state: vm.state }, "removed a VM that belongs to no box");
          return { kind: "removed_vm", slug: vm.slug };
        });
      }
      for (const a of h.ipPool.all()) {
        if (known.has(a.slug) || this.d.runner.busy(a.slug)) continue;
        await attempt(`ip ${a.ip}`, async () => {
          h.ipPool.free(a.slug);
          return { kind: "freed_ip", slug: a.slug, ip: a.ip };
        });
      }
      if (network) {
        const knownTaps = new Set(h.boxes.all().flatMap((b) => (b.tap ? [b.tap] : [])));
        for (const a of h.ipPool.all()) if (parked.has(a.slug)) knownTaps.add(tapNameForIp(a.ip));
        knownTaps.add(tapNameForIp(h.ipPool.golden()));
        for (const tap of await network.listTaps()) {
          if (knownTaps.has(tap)) continue;
          await attempt(`tap ${tap}`, async () => {
            await network.removeTap(tap);
            return { kind: "removed_tap", tap };
          });
        }
      }
    }

    if (this.d.edge) {
      const edge = this.d.edge;
      await attempt("edge config", async () =>
        (await edge.ensureConfig()) === "loaded" ? { kind: "edge_reloaded" } : null,
      );
    }

    const hostWide = [...before, ...actions];
    for (const a of hostWide) this.d.metrics.reconcileActions.inc({ action: a.kind });
    if (hostWide.length > 0) this.d.log.info({ actions: hostWide }, "reconcile corrected the host");
    return { before, boxes, after: actions };
  }
}

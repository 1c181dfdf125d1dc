import { existsSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import path from "node:path";
import type { ContractValidator, MatchedOperation } from "./contract.ts";

/**
 * Stands in for a Firecracker process: an HTTP server on the API socket that accepts only
 * what the published description accepts, answers with the codes and bodies it declares,
 * and applies the ordering rules its prose states ("Pre-boot only", "Post-boot only",
 * snapshot load only on a fresh process, snapshot create only when Paused, MMDS interfaces
 * must exist). Every request is recorded.
 */

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  status: number;
  fault?: string;
}

type Phase = "not_started" | "running" | "paused";

export interface FakeOptions {
  id: string;
  /** Held before answering a request (after validation); lets tests keep calls in flight. */
  gate?: (req: RecordedRequest) => Promise<void>;
  /** The guest reboots on Ctrl+Alt+Del and, booted with `reboot=k`, the VMM exits. */
  onCtrlAltDel?: () => void;
  /**
   * The jail root and uid the VMM would run as: paths in bodies are resolved inside it
   * (as the jailed process would), must exist, and writable drives must belong to `uid`.
   */
  jail?: { root: string; uid: number };
}

export class FakeFirecracker {
  readonly requests: RecordedRequest[] = [];
  readonly socketPath: string;
  /** Problems found in our own responses (must stay empty). */
  readonly responseProblems: string[] = [];
  private readonly server: Server;
  private readonly validator: ContractValidator;
  private readonly opts: FakeOptions;
  private phase: Phase = "not_started";
  private configuredOther = false;
  private loadedFromSnapshot = false;
  private readonly ifaces = new Set<string>();
  private bootSource = false;
  private balloon = false;
  private mmds: Record<string, unknown> | null = null;

  private constructor(socketPath: string, validator: ContractValidator, opts: FakeOptions) {
    this.socketPath = socketPath;
    this.validator = validator;
    this.opts = opts;
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        res.statusCode = 500;
        res.end(JSON.stringify({ fault_message: String(err) }));
      });
    });
  }

  static async listen(
    socketPath: string,
    validator: ContractValidator,
    opts: FakeOptions,
  ): Promise<FakeFirecracker> {
    const fake = new FakeFirecracker(socketPath, validator, opts);
    await new Promise<void>((resolve, reject) => {
      fake.server.once("error", reject);
      fake.server.listen(socketPath, () => resolve());
    });
    return fake;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    rmSync(this.socketPath, { force: true });
  }

  /** Non-GET requests as `METHOD /path`, the order the VMM saw them. */
  calls(): string[] {
    return this.requests.filter((r) => r.method !== "GET").map((r) => `${r.method} ${r.path}`);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString("utf8");
    const method = req.method ?? "GET";
    const urlPath = (req.url ?? "/").split("?")[0] ?? "/";
    let body: unknown;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = raw;
    }
    const record: RecordedRequest = { method, path: urlPath, body, status: 0 };
    this.requests.push(record);
    const verdict = this.validator.validateRequest(method, urlPath, raw);
    let fault = verdict.ok ? this.applyRules(verdict.match, body) : verdict.error;
    if (!fault && this.opts.gate) await this.opts.gate(record);
    let status = 204;
    let out: unknown;
    if (!fault && verdict.match) {
      const answer = this.answer(verdict.match);
      if ("fault" in answer) fault = answer.fault;
      else ({ status, body: out } = answer);
    }
    if (fault) {
      status = verdict.match?.op.responses["404"] && fault.includes("not found") ? 404 : 400;
      out = { fault_message: fault };
      record.fault = fault;
    }
    record.status = status;
    if (verdict.match) {
      const problem = this.validator.validateResponse(verdict.match, status, out);
      if (problem) this.responseProblems.push(`${method} ${urlPath}: ${problem}`);
    }
    res.statusCode = status;
    if (out === undefined) {
      res.end();
    } else {
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify(out));
    }
    if (!fault && method === "PUT" && urlPath === "/actions") {
      if ((body as { action_type?: string }).action_type === "SendCtrlAltDel")
        setImmediate(() => this.opts.onCtrlAltDel?.());
    }
  }

  /** Ordering rules the description states in prose; returns a fault message or null. */
  private applyRules(match: MatchedOperation, body: unknown): string | null {
    const text = `${match.op.summary ?? ""} ${match.op.description ?? ""}`;
    const started = this.phase !== "not_started";
    const key = `${match.method} ${match.template}`;
    if (
      match.method !== "GET" &&
      (/Pre-boot only/.test(text) || /fail after machine startup/.test(text)) &&
      started
    ) {
      return "The requested operation is not supported after starting the microVM.";
    }
    if (/Post-boot only/.test(text) && !started) {
      return "The requested operation is not supported before starting the microVM.";
    }
    const b = (body ?? {}) as Record<string, unknown>;
    for (const [name, value] of Object.entries(match.pathParams)) {
      const bodyId = name === "id" ? b.id : b[name];
      if (bodyId !== undefined && bodyId !== value)
        return `The id from the path (${value}) does not match the body (${bodyId}).`;
    }
    const fileProblem = this.checkFiles(key, b);
    if (fileProblem) return fileProblem;
    switch (key) {
      case "PUT /snapshot/load":
        if (this.configuredOther)
          return "Loading a microVM snapshot not allowed after configuring boot-specific resources.";
        this.loadedFromSnapshot = true;
        this.phase = b.resume_vm === true ? "running" : "paused";
        return null;
      case "PUT /snapshot/create":
        if (this.phase !== "paused") return "Cannot create a snapshot: the microVM is not paused.";
        if (this.opts.jail) {
          writeFileSync(path.join(this.opts.jail.root, String(b.snapshot_path)), "vmstate");
          writeFileSync(path.join(this.opts.jail.root, String(b.mem_file_path)), "guest memory");
        }
        return null;
      case "PATCH /vm":
        if (!started) return "The microVM is not running.";
        this.phase = b.state === "Paused" ? "paused" : "running";
        return null;
      case "PUT /actions":
        if (b.action_type === "InstanceStart") {
          if (started) return "The microVM is already running.";
          if (!this.bootSource) return "Cannot start microvm without kernel configuration.";
          this.phase = "running";
        } else if (b.action_type === "SendCtrlAltDel" && this.phase !== "running") {
          // Not stated by the description; modelled because a paused guest cannot react.
          return "The microVM is not running.";
        }
        return null;
      case "PUT /mmds/config": {
        const missing = ((b.network_interfaces as string[]) ?? []).filter((i) => !this.ifaces.has(i));
        this.configuredOther = true;
        return missing.length
          ? `The list of network interface IDs is invalid: ${missing.join(",")} not found.`
          : null;
      }
      case "PATCH /balloon":
        return this.balloon || this.loadedFromSnapshot ? null : "Balloon device not found.";
      case "PUT /mmds":
      case "PATCH /mmds":
        this.mmds = match.method === "PUT" ? (b as Record<string, unknown>) : { ...(this.mmds ?? {}), ...b };
        return null;
    }
    if (match.method === "PUT" && key !== "PUT /logger" && key !== "PUT /metrics")
      this.configuredOther = true;
    if (key === "PUT /network-interfaces/{iface_id}") this.ifaces.add(String(b.iface_id));
    if (key === "PUT /boot-source") this.bootSource = true;
    if (key === "PUT /balloon") this.balloon = true;
    return null;
  }

  private checkFiles(key: string, b: Record<string, unknown>): string | null {
    const jail = this.opts.jail;
    if (!jail) return null;
    const mem = b.mem_backend as { backend_path?: unknown } | undefined;
    const reads: Record<string, unknown[]> = {
      "PUT /boot-source": [b.kernel_image_path],
      "PUT /drives/{drive_id}": [b.path_on_host],
      "PUT /logger": [b.log_path],
      "PUT /metrics": [b.metrics_path],
      "PUT /snapshot/load": [b.snapshot_path, mem?.backend_path],
    };
    for (const p of reads[key] ?? []) {
      if (typeof p !== "string") continue;
      const host = path.join(jail.root, p);
      if (!existsSync(host)) return `Cannot open ${p}: No such file or directory (os error 2)`;
      const st = statSync(host);
      const writable = key !== "PUT /boot-source" && key !== "PUT /snapshot/load" && b.is_read_only !== true;
      if (writable && (st.uid !== jail.uid || (st.mode & 0o200) === 0))
        return `Cannot open ${p} read-write: Permission denied (os error 13)`;
      if (!writable && st.uid !== jail.uid && (st.mode & 0o004) === 0) {
        return `Cannot open ${p}: Permission denied (os error 13)`;
      }
    }
    if (key === "PUT /snapshot/create") {
      for (const p of [b.snapshot_path, b.mem_file_path]) {
        const dir = path.dirname(path.join(jail.root, String(p)));
        if (!existsSync(dir) || statSync(dir).uid !== jail.uid)
          return `Cannot create ${String(p)}: Permission denied (os error 13)`;
      }
    }
    return null;
  }

  private answer(match: MatchedOperation): { status: number; body?: unknown } | { fault: string } {
    if (match.method !== "GET") return { status: 204 };
    switch (match.template) {
      case "/":
        return {
          status: 200,
          body: {
            app_name: "Firecracker",
            id: this.opts.id,
            state:
              this.phase === "not_started" ? "Not started" : this.phase === "paused" ? "Paused" : "Running",
            vmm_version: this.validator.version,
          },
        };
      case "/version":
        return { status: 200, body: { firecracker_version: this.validator.version } };
      case "/mmds":
        return this.mmds
          ? { status: 200, body: this.mmds }
          : { fault: "The MMDS data store content was not found." };
      default:
        return { fault: `GET ${match.template} is not modelled by the fake` };
    }
  }
}

import { request } from "node:http";
import type {
  ActionType,
  Balloon,
  BalloonUpdate,
  BootSource,
  Drive,
  EntropyDevice,
  FaultBody,
  FirecrackerVersion,
  InstanceInfo,
  Logger,
  MachineConfiguration,
  Metrics,
  MmdsConfig,
  MmdsContents,
  NetworkInterface,
  SnapshotCreateParams,
  SnapshotLoadParams,
  Vm,
} from "./api-types.ts";
import { FirecrackerError } from "./errors.ts";

type Method = "GET" | "PUT" | "PATCH";

export interface ClientOptions {
  /** Per-request limit; snapshot create/load of a large guest needs minutes. */
  timeoutMs?: number;
  snapshotTimeoutMs?: number;
}

/** Typed client for one Firecracker process's API socket. */
export class FirecrackerClient {
  readonly socketPath: string;
  private readonly timeoutMs: number;
  private readonly snapshotTimeoutMs: number;

  constructor(socketPath: string, opts: ClientOptions = {}) {
    this.socketPath = socketPath;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.snapshotTimeoutMs = opts.snapshotTimeoutMs ?? 300_000;
  }

  describeInstance(): Promise<InstanceInfo> {
    return this.call("GET", "/") as Promise<InstanceInfo>;
  }
  version(): Promise<FirecrackerVersion> {
    return this.call("GET", "/version") as Promise<FirecrackerVersion>;
  }
  putLogger(body: Logger): Promise<void> {
    return this.send("PUT", "/logger", body);
  }
  putMetrics(body: Metrics): Promise<void> {
    return this.send("PUT", "/metrics", body);
  }
  putMachineConfig(body: MachineConfiguration): Promise<void> {
    return this.send("PUT", "/machine-config", body);
  }
  putBootSource(body: BootSource): Promise<void> {
    return this.send("PUT", "/boot-source", body);
  }
  putDrive(body: Drive): Promise<void> {
    return this.send("PUT", `/drives/${encodeURIComponent(body.drive_id)}`, body);
  }
  putNetworkInterface(body: NetworkInterface): Promise<void> {
    return this.send("PUT", `/network-interfaces/${encodeURIComponent(body.iface_id)}`, body);
  }
  putEntropy(body: EntropyDevice): Promise<void> {
    return this.send("PUT", "/entropy", body);
  }
  putBalloon(body: Balloon): Promise<void> {
    return this.send("PUT", "/balloon", body);
  }
  patchBalloon(body: BalloonUpdate): Promise<void> {
    return this.send("PATCH", "/balloon", body);
  }
  putMmdsConfig(body: MmdsConfig): Promise<void> {
    return this.send("PUT", "/mmds/config", body);
  }
  putMmds(body: MmdsContents): Promise<void> {
    return this.send("PUT", "/mmds", body);
  }
  patchMmds(body: MmdsContents): Promise<void> {
    return this.send("PATCH", "/mmds", body);
  }
  getMmds(): Promise<MmdsContents> {
    return this.call("GET", "/mmds") as Promise<MmdsContents>;
  }
  action(action_type: ActionType): Promise<void> {
    return this.send("PUT", "/actions", { action_type });
  }
  patchVm(state: Vm["state"]): Promise<void> {
    return this.send("PATCH", "/vm", { state } satisfies Vm);
  }
  createSnapshot(body: SnapshotCreateParams): Promise<void> {
    return this.send("PUT", "/snapshot/create", body, this.snapshotTimeoutMs);
  }
  loadSnapshot(body: SnapshotLoadParams): Promise<void> {
    return this.send("PUT", "/snapshot/load", body, this.snapshotTimeoutMs);
  }

  private async send(method: Method, path: string, body: unknown, timeoutMs?: number): Promise<void> {
    await this.call(method, path, body, timeoutMs);
  }

  private call(method: Method, path: string, body?: unknown, timeoutMs = this.timeoutMs): Promise<unknown> {
    const label = `${method} ${path}`;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = { Accept: "application/json" };
      if (payload) {
        headers["Content-Type"] = "application/json";
        headers["Content-Length"] = payload.length;
      }
      const req = request(
        { socketPath: this.socketPath, method, path, headers, timeout: timeoutMs },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", (err) =>
            reject(
              new FirecrackerError("api_unreachable", `${label}: ${err.message}`, {
                cause: err,
                request: label,
              }),
            ),
          );
          res.on("end", () => {
            const status = res.statusCode ?? 0;
            const text = Buffer.concat(chunks).toString("utf8");
            let parsed: unknown;
            try {
              parsed = text.length > 0 ? JSON.parse(text) : undefined;
            } catch (err) {
              if (status >= 200 && status < 300) {
                reject(
                  new FirecrackerError("api_unreachable", `${label}: reply is not JSON`, {
                    cause: err,
                    request: label,
                  }),
                );
                return;
              }
            }
            if (status >= 200 && status < 300) {
              resolve(parsed);
              return;
            }
            const fault = (parsed as FaultBody | undefined)?.fault_message ?? (text || `HTTP ${status}`);
            reject(
              new FirecrackerError("api_rejected", `${label} failed (${status}): ${fault}`, {
                status,
                request: label,
                faultMessage: fault,
              }),
            );
          });
        },
      );
      req.on("timeout", () => {
        req.destroy(
          new FirecrackerError("timeout", `${label}: no answer within ${timeoutMs} ms`, { request: label }),
        );
      });
      req.on("error", (err) => {
        if (err instanceof FirecrackerError) reject(err);
        else
          reject(
            new FirecrackerError("api_unreachable", `${label}: ${err.message}`, {
              cause: err,
              request: label,
            }),
          );
      });
      req.end(payload);
    });
  }
}

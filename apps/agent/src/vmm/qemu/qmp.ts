import { EventEmitter } from "node:events";
import { createConnection, type Socket } from "node:net";
import { setTimeout as delay } from "node:timers/promises";
import { QemuError } from "./errors.ts";

export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  timestamp?: { seconds: number; microseconds: number };
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  command: string;
}

/**
 * QMP over a unix socket: JSON lines, greeting + `qmp_capabilities`, commands correlated
 * with responses by `id`, asynchronous events emitted as "event". One client per socket.
 */
export class QmpClient extends EventEmitter<{ event: [QmpEvent]; close: [] }> {
  readonly #socket: Socket;
  readonly #pending = new Map<string, Pending>();
  #buffer = "";
  #nextId = 1;
  #closed = false;

  private constructor(socket: Socket) {
    super();
    this.#socket = socket;
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.#onData(chunk));
    socket.on("close", () => this.#onClose(new QemuError("qmp_unreachable", "QMP socket closed")));
    socket.on("error", (err) =>
      this.#onClose(new QemuError("qmp_unreachable", `QMP socket error: ${err.message}`, { cause: err })),
    );
  }

  /** Connects (retrying while the socket is not there yet) and negotiates capabilities. */
  static async connect(path: string, timeoutMs = 10_000): Promise<QmpClient> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        return await QmpClient.#tryConnect(path, Math.max(500, deadline - Date.now()));
      } catch (err) {
        if (Date.now() >= deadline) {
          throw new QemuError("qmp_unreachable", `cannot connect to QMP at ${path}`, { cause: err });
        }
        await delay(10);
      }
    }
  }

  static async #tryConnect(path: string, timeoutMs: number): Promise<QmpClient> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = createConnection(path);
      s.once("connect", () => {
        s.off("error", reject);
        resolve(s);
      });
      s.once("error", reject);
    });
    const greeting = new Promise<void>((resolve, reject) => {
      let buf = "";
      const onData = (chunk: Buffer) => {
        buf += chunk.toString("utf8");
        const nl = buf.indexOf("\n");
        if (nl < 0) return;
        socket.off("data", onData);
        socket.off("error", reject);
        const line = buf.slice(0, nl);
        if (!line.includes('"QMP"'))
          reject(new QemuError("qmp_unreachable", `unexpected QMP greeting: ${line}`));
        else {
          // Anything after the greeting is replayed once the client parses lines.
          if (buf.length > nl + 1) socket.unshift(Buffer.from(buf.slice(nl + 1)));
          resolve();
        }
      };
      socket.on("data", onData);
      socket.once("error", reject);
    });
    try {
      await withTimeout(greeting, timeoutMs, "QMP greeting");
    } catch (err) {
      socket.destroy();
      throw err;
    }
    const client = new QmpClient(socket);
    try {
      await client.execute("qmp_capabilities", undefined, timeoutMs);
    } catch (err) {
      client.close();
      throw err;
    }
    return client;
  }

  /** Runs a QMP command and resolves with its `return` value. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>, timeoutMs = 30_000): Promise<T> {
    if (this.#closed) return Promise.reject(new QemuError("qmp_unreachable", `QMP closed before ${command}`));
    const id = String(this.#nextId++);
    const result = new Promise<unknown>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, command });
    });
    this.#socket.write(
      `${JSON.stringify(args ? { execute: command, arguments: args, id } : { execute: command, id })}\n`,
    );
    return withTimeout(result, timeoutMs, `QMP ${command}`).finally(() =>
      this.#pending.delete(id),
    ) as Promise<T>;
  }

  get closed(): boolean {
    return this.#closed;
  }

  close(): void {
    this.#socket.destroy();
    this.#onClose(new QemuError("qmp_unreachable", "QMP client closed"));
  }

  #onData(chunk: string): void {
    this.#buffer += chunk;
    for (let nl = this.#buffer.indexOf("\n"); nl >= 0; nl = this.#buffer.indexOf("\n")) {
      const line = this.#buffer.slice(0, nl).trim();
      this.#buffer = this.#buffer.slice(nl + 1);
      if (line) this.#onLine(line);
    }
  }

  #onLine(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if (typeof msg.event === "string") {
      this.emit("event", msg as unknown as QmpEvent);
      return;
    }
    const pending = typeof msg.id === "string" ? this.#pending.get(msg.id) : undefined;
    if (!pending) return;
    this.#pending.delete(msg.id as string);
    if ("error" in msg) {
      const e = msg.error as { class?: string; desc?: string };
      pending.reject(
        new QemuError("qmp_error", `QMP ${pending.command}: ${e.class ?? "Error"}: ${e.desc ?? ""}`),
      );
    } else {
      pending.resolve(msg.return);
    }
  }

  #onClose(err: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    this.emit("close");
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new QemuError("timeout", `${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Polls `query-migrate` until the migration `what` names completed; its failure or timeout throws. */
export async function waitMigration(qmp: QmpClient, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const info = await qmp.execute<{ status?: string; "error-desc"?: string }>("query-migrate");
    if (info.status === "completed") return;
    if (info.status === "failed" || info.status === "cancelled") {
      throw new QemuError("migration_failed", `${what} ${info.status}: ${info["error-desc"] ?? ""}`);
    }
    if (Date.now() > deadline) throw new QemuError("timeout", `${what} did not complete`);
    await delay(20);
  }
}

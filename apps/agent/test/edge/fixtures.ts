import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";
import WebSocket, { WebSocketServer } from "ws";

/** What a stand-in guest service saw; it echoes this back as JSON. */
export interface Seen {
  role: string;
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** A stand-in for one guest service: HTTP echo + WebSocket echo on 127.0.0.1. */
export class FakeGuest {
  readonly role: string;
  readonly #server: Server;
  readonly #wss: WebSocketServer;

  private constructor(role: string, server: Server, wss: WebSocketServer) {
    this.role = role;
    this.#server = server;
    this.#wss = wss;
  }

  static async start(role: string): Promise<FakeGuest> {
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const seen: Seen = {
          role,
          method: req.method ?? "",
          url: req.url ?? "",
          headers: req.headers,
          body: Buffer.concat(chunks).toString("utf8"),
        };
        // Padded so gzip has something worth compressing.
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ ...seen, pad: "x".repeat(2048) }));
      });
    });
    // Accepts permessage-deflate whenever a client offers it, as VS Code's server does.
    const wss = new WebSocketServer({ server, perMessageDeflate: true });
    wss.on("connection", (ws, req) => {
      // Caddy 2.6.2 sends the upstream an unmasked close frame when a config change tears
      // the tunnel down; ws reports that as an error we only need to survive.
      ws.on("error", () => ws.terminate());
      ws.on("message", (data) => ws.send(`${role}:${req.headers.host}:${data.toString()}`));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return new FakeGuest(role, server, wss);
  }

  get address(): string {
    return `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const c of this.#wss.clients) c.terminate();
    this.#wss.close();
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

export interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** HTTP through the edge with an explicit Host (fetch does not let us set Host). */
export function edgeRequest(
  edge: string,
  host: string,
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  const [hostname, port] = edge.split(":") as [string, string];
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        hostname,
        port: Number(port),
        path,
        method: opts.method ?? "GET",
        headers: { host, ...opts.headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          let buf = Buffer.concat(chunks);
          if (res.headers["content-encoding"] === "gzip") buf = gunzipSync(buf);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: buf.toString("utf8") });
        });
      },
    );
    req.on("error", reject);
    req.end(opts.body);
  });
}

export function seen(reply: Reply): Seen {
  if (reply.status !== 200)
    throw new Error(`expected 200 from a guest, got ${reply.status}: ${reply.body.slice(0, 300)}`);
  return JSON.parse(reply.body) as Seen;
}

/** Open a WebSocket through the edge; resolves once open. */
export function openWs(edge: string, host: string, headers: Record<string, string> = {}): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://${edge}/ws`, { headers: { host, ...headers } });
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`websocket refused: ${res.statusCode}`)));
  });
}

export function echo(ws: WebSocket, text: string, timeoutMs = 5_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no websocket echo")), timeoutMs);
    ws.once("message", (data) => {
      clearTimeout(timer);
      resolve(data.toString());
    });
    ws.send(text);
  });
}

/** Resolves with the close code when the socket closes; rejects if it is still open after `timeoutMs`. */
export function closed(ws: WebSocket, timeoutMs: number): Promise<number> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve(1006);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("websocket still open")), timeoutMs);
    ws.once("close", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

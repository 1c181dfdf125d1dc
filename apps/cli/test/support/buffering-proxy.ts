import { createServer, request, type Server } from "node:http";

/**
 * A loopback reverse proxy that forwards every request to `target` except the event
 * stream, which it accepts and then never writes to: what a buffering proxy in front of
 * the control plane looks like to a client.
 */
export async function startBufferingProxy(target: string): Promise<{ url: string; close(): Promise<void> }> {
  const upstream = new URL(target);
  const held = new Set<import("node:http").ServerResponse>();
  const server: Server = createServer((req, res) => {
    if (req.url?.startsWith("/api/v1/events")) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      held.add(res);
      res.on("close", () => held.delete(res));
      return;
    }
    const forward = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    forward.on("error", () => res.destroy());
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

import { connect, createServer, type Socket } from "node:net";

export interface CuttableProxy {
  url: string;
  /** Connections it has accepted so far (a client that reconnects makes a new one). */
  accepted(): number;
  /** Drops every open connection at once, as a network blip or a proxy restart would. */
  cut(): void;
  close(): Promise<void>;
}

/** A loopback TCP proxy to `target` whose open connections a test can cut. */
export async function startCuttableProxy(target: string): Promise<CuttableProxy> {
  const upstream = new URL(target);
  const sockets = new Set<Socket>();
  let accepted = 0;
  const track = (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => s.destroy());
  };
  const server = createServer((client) => {
    accepted++;
    const up = connect(Number(upstream.port), upstream.hostname);
    track(client);
    track(up);
    client.on("close", () => up.destroy());
    up.on("close", () => client.destroy());
    client.pipe(up);
    up.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  const cut = () => {
    for (const s of sockets) s.destroy();
  };
  return {
    url: `http://127.0.0.1:${port}`,
    accepted: () => accepted,
    cut,
    async close() {
      cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

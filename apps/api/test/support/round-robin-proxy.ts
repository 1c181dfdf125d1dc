import net from "node:net";

/**
 * What stands in front of several control-plane replicas in production (a TCP load
 * balancer): each new connection goes to the next replica, and to the one after it when
 * that one refuses (a killed replica). Open connections die with their replica, as they
 * would behind a real balancer; clients reconnect.
 */
export class RoundRobinProxy {
  readonly #servers: net.Server[] = [];
  readonly #sockets = new Set<net.Socket>();
  #next = 0;

  private constructor(
    private readonly backends: Array<{ host: string; port: number }>,
    public port: number,
  ) {}

  /** Listens on `port` (0: any) on each of `hosts`. */
  static async start(
    backends: Array<{ host: string; port: number }>,
    hosts: string[] = ["127.0.0.1"],
    port = 0,
  ): Promise<RoundRobinProxy> {
    const [first, ...rest] = hosts;
    const proxy = new RoundRobinProxy(backends, 0);
    const server = await proxy.#listen(first!, port);
    proxy.port = (server.address() as net.AddressInfo).port;
    for (const host of rest) await proxy.listenOn(host);
    return proxy;
  }

  /** Also listen on `host` (the same port), e.g. an address added later. */
  async listenOn(host: string): Promise<void> {
    await this.#listen(host, this.port);
  }

  async #listen(host: string, port: number): Promise<net.Server> {
    const server = net.createServer((client) => this.#accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => resolve());
    });
    this.#servers.push(server);
    return server;
  }

  #accept(client: net.Socket): void {
    this.#track(client);
    client.pause();
    client.on("error", () => client.destroy());
    const first = this.#next++ % this.backends.length;
    const attempt = (tried: number) => {
      if (client.destroyed) return;
      if (tried >= this.backends.length) return client.destroy();
      const target = this.backends[(first + tried) % this.backends.length]!;
      const upstream = net.connect(target.port, target.host);
      upstream.once("error", () => {
        upstream.destroy();
        attempt(tried + 1);
      });
      upstream.once("connect", () => {
        upstream.removeAllListeners("error");
        this.#track(upstream);
        client.pipe(upstream).pipe(client);
        client.resume();
        const close = () => {
          client.destroy();
          upstream.destroy();
        };
        client.on("close", close);
        upstream.on("error", close).on("close", close);
      });
    };
    attempt(0);
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await Promise.all(this.#servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  }

  #track(s: net.Socket): void {
    this.#sockets.add(s);
    s.on("close", () => this.#sockets.delete(s));
  }
}

import { createServer, type Server, type Socket } from "node:net";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/db/client.ts";

/**
 * A PostgreSQL address that accepts TCP connections and never answers (a server stuck in a
 * restart, a black-holed path): the control plane's pool gives up on the attempt with an
 * error after its connect timeout instead of waiting, and holding its request, forever.
 */
describe("database connection attempts that never complete", () => {
  let server: Server;
  let port = 0;
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    server = createServer((s) => {
      sockets.add(s);
      s.resume(); // read (and drop) what the client sends, so its hang-up is seen
      s.on("close", () => sockets.delete(s));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });

  it("fail after the connect timeout", async () => {
    const opening = openDatabase({
      databaseUrl: `postgres://doppio:secret@127.0.0.1:${port}/doppio`,
      dataDir: "unused",
      log: pino({ level: "silent" }),
      connectTimeoutMs: 300,
      poolSize: 2,
    });
    const outcome = await Promise.race([
      opening.then(
        () => "opened",
        (err: Error) => err.message,
      ),
      new Promise<string>((resolve) => setTimeout(() => resolve("still waiting after 10 s"), 10_000)),
    ]);
    expect(outcome).toMatch(/timeout/i);
    // The abandoned attempt's socket is closed, not left open.
    await expect.poll(() => sockets.size, { timeout: 5_000 }).toBe(0);
  });
});

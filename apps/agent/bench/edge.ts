/**
 * Edge latency: what the forward-auth check costs per request.
 *
 * One real Caddy 2.6.2, one stand-in guest on loopback. Requests alternate between
 *   A) the production path: Caddy → GET /edge/check on the agent → Caddy → guest
 *   B) a static Caddy route straight to the same guest (what per-box routes would cost)
 *   C) a private code-server URL with the access cookie (adds the cookie HMAC check)
 * over keep-alive connections, so every sample of A, B and C sees the same machine state.
 *
 *   npx tsx apps/agent/bench/edge.ts [requests=2000]
 */
import { Agent, request } from "node:http";
import { performance } from "node:perf_hooks";
import { freePort } from "../../api/test/support/ports.ts";
import { cookieFrom, DOMAIN, forHost, startEdge } from "../test/edge/harness.ts";
import { findCaddy } from "../test/support/caddy.ts";

const N = Number(process.argv[2] ?? 2000);
const WARMUP = 200;

if (!findCaddy()) {
  console.error("edge bench needs `caddy` (2.6.2) on PATH");
  process.exit(1);
}

const e = await startEdge();
try {
  e.box("alpha");
  const site = e.guests.find((g) => g.role === "site")!;
  const code = e.guests.find((g) => g.role === "code")!;
  const direct = `127.0.0.1:${await freePort()}`;
  const config = structuredClone(e.desiredConfig) as {
    apps: { http: { servers: Record<string, unknown> } };
  };
  config.apps.http.servers.direct = {
    listen: [direct],
    automatic_https: { disable: true },
    routes: [
      {
        match: [{ host: [`alpha.site.${DOMAIN}`] }],
        handle: [{ handler: "reverse_proxy", upstreams: [{ dial: site.address }] }],
      },
      {
        match: [{ host: [`alpha.code.${DOMAIN}`] }],
        handle: [{ handler: "reverse_proxy", upstreams: [{ dial: code.address }] }],
      },
    ],
  };
  await e.caddy.admin.load(config);

  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const get = (addr: string, host: string, headers: Record<string, string> = {}) =>
    new Promise<{ ms: number; status: number; headers: Record<string, unknown> }>((resolve, reject) => {
      const [hostname, port] = addr.split(":") as [string, string];
      const t0 = performance.now();
      const req = request(
        { hostname, port: Number(port), path: "/", agent, headers: { host, ...headers } },
        (res) => {
          res.resume();
          res.on("end", () =>
            resolve({ ms: performance.now() - t0, status: res.statusCode ?? 0, headers: res.headers }),
          );
        },
      );
      req.on("error", reject);
      req.end();
    });

  const token = e.handoff(forHost(`alpha.code.${DOMAIN}`));
  const signIn = await new Promise<string>((resolve, reject) => {
    const [hostname, port] = e.edge.split(":") as [string, string];
    request(
      {
        hostname,
        port: Number(port),
        path: `/__doppio/auth?token=${token}`,
        headers: { host: `alpha.code.${DOMAIN}` },
      },
      (res) => {
        res.resume();
        resolve(cookieFrom(res.headers["set-cookie"]));
      },
    )
      .on("error", reject)
      .end();
  });

  const cases = {
    "site via forward-auth": () => get(e.edge, `alpha.site.${DOMAIN}`),
    "site via static route": () => get(direct, `alpha.site.${DOMAIN}`),
    "code via forward-auth + cookie": () => get(e.edge, `alpha.code.${DOMAIN}`, { cookie: signIn }),
    "code via static route": () => get(direct, `alpha.code.${DOMAIN}`),
  };
  const samples = Object.fromEntries(Object.keys(cases).map((k) => [k, [] as number[]]));
  for (let i = 0; i < WARMUP + N; i++) {
    for (const [name, run] of Object.entries(cases)) {
      const r = await run();
      if (r.status !== 200) throw new Error(`${name}: status ${r.status}`);
      if (i >= WARMUP) samples[name]!.push(r.ms);
    }
  }
  agent.destroy();

  const pct = (xs: number[], p: number) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
  };
  console.log(
    `edge bench: ${N} requests per case (after ${WARMUP} warm-up), keep-alive, loopback, caddy 2.6.2`,
  );
  console.log("case                              p50 ms   p90 ms   p99 ms");
  for (const [name, xs] of Object.entries(samples)) {
    console.log(
      `${name.padEnd(32)} ${pct(xs, 50).toFixed(3).padStart(7)}  ${pct(xs, 90).toFixed(3).padStart(7)}  ${pct(xs, 99).toFixed(3).padStart(7)}`,
    );
  }
  const d = (a: string, b: string) => (pct(samples[a]!, 50) - pct(samples[b]!, 50)).toFixed(3);
  console.log(
    `forward-auth overhead at p50: site +${d("site via forward-auth", "site via static route")} ms, code +${d("code via forward-auth + cookie", "code via static route")} ms`,
  );
} finally {
  await e.close();
}

/**
 * What the tenant-isolation firewall costs, measured side by side in one run, in network
 * namespaces made here:
 *
 * 1. Create path: attaching a box's TAP with the firewall (an nft `ports` element + one
 *    `ip -batch` that enslaves and isolates the port) against the attach it replaced (a
 *    plain `ip tuntap add` + `ip link set master up`), alternating, N times each.
 * 2. Box throughput: site requests per second through a real Caddy edge to a real guest
 *    (QEMU, minimal template) with the rules loaded and with both tables removed,
 *    alternating rounds of the same length.
 *
 *   npm run bench:isolation [-- --taps 40 --rounds 3 --seconds 5 --concurrency 8]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort } from "../../api/test/support/ports.ts";
import { run } from "../src/net/command.ts";
import { removeTablesScript } from "../src/net/firewall.ts";
import { LinuxHostNetwork } from "../src/net/host-network.ts";
import { macForIp, tapNameForIp } from "../src/net/naming.ts";
import type { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import {
  boxSpec,
  buildMinimalImage,
  minimalGoldenExecutor,
  qemuUnavailable,
  RecordingReporter,
} from "../test/qemu/support.ts";
import { TestNetns } from "../test/support/netns.ts";

const { values } = parseArgs({
  options: {
    taps: { type: "string", default: "40" },
    rounds: { type: "string", default: "3" },
    seconds: { type: "string", default: "5" },
    concurrency: { type: "string", default: "8" },
  },
});
/** A keep-alive HTTP load client, run by node inside the namespace: prints {ok, failed, seconds}. */
const LOAD_CLIENT = `
const http = require("node:http");
const [port, conc, dur] = process.argv.slice(1).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets: conc });
let ok = 0, failed = 0;
const t0 = Date.now();
const one = () => new Promise((done) => {
  const req = http.get({ host: "127.0.0.1", port, path: "/", agent, headers: { host: "box.site.test" } }, (res) => {
    res.resume();
    res.on("end", () => { res.statusCode === 200 ? ok++ : failed++; done(); });
  });
  req.on("error", () => { failed++; done(); });
});
const worker = async () => { while (Date.now() - t0 < dur) await one(); };
Promise.all(Array.from({ length: conc }, worker)).then(() => {
  agent.destroy();
  console.log(JSON.stringify({ ok, failed, seconds: (Date.now() - t0) / 1000 }));
});
`;

const missing = qemuUnavailable();
if (missing) {
  console.error(`bench:isolation needs ${missing}`);
  process.exit(2);
}

const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (t0: number) => performance.now() - t0;

const ns = TestNetns.create("dbxb");
const dataDir = mkdtempSync(join(tmpdir(), "dbxb-"));
let caddy: ChildProcess | null = null;
let ex: QemuExecutor | null = null;
try {
  buildMinimalImage("isolation");
  const network = new LinuxHostNetwork({
    bridge: "br-devbox",
    cidr: "10.0.0.0/16",
    netns: ns.name,
    gatewayPorts: [8169],
  });
  await network.ensureBridge();

  // 1. Create path: the TAP attach with and without the firewall's per-box work.
  const withRules: number[] = [];
  const without: number[] = [];
  for (let i = 0; i < Number(values.taps); i++) {
    const ip = `10.0.1.${(i % 200) + 2}`;
    const tap = tapNameForIp(ip);
    let t0 = performance.now();
    await network.createTap(tap, { ip, mac: macForIp(ip) });
    withRules.push(ms(t0));
    await network.removeTap(tap);
    t0 = performance.now();
    await run("ip", ["-n", ns.name, "tuntap", "add", "dev", tap, "mode", "tap"]);
    await run("ip", ["-n", ns.name, "link", "set", "dev", tap, "master", "br-devbox", "up"]);
    without.push(ms(t0));
    await run("ip", ["-n", ns.name, "link", "del", "dev", tap]);
  }
  console.log(`create path: TAP attach, ${withRules.length} each, alternating`);
  console.log(
    `  with firewall    p50 ${pct(withRules, 50).toFixed(2)} ms  p90 ${pct(withRules, 90).toFixed(2)} ms`,
  );
  console.log(
    `  without          p50 ${pct(without, 50).toFixed(2)} ms  p90 ${pct(without, 90).toFixed(2)} ms`,
  );
  console.log(
    `  firewall adds    ${(pct(withRules, 50) - pct(without, 50)).toFixed(2)} ms at p50 per create`,
  );

  // 2. Throughput through the edge to a real guest.
  ex = await minimalGoldenExecutor({ dataDir, network, netns: ns.name, imageVersion: "isolation" });
  await ex.createFromGolden(boxSpec("bench-box", "10.0.0.2", 1, { probe: true }), new RecordingReporter());
  const edgePort = await freePort();
  const caddyDir = mkdtempSync(join(tmpdir(), "dbxb-caddy-"));
  const caddyFile = join(caddyDir, "caddy.json");
  writeFileSync(
    caddyFile,
    JSON.stringify({
      admin: { disabled: true },
      apps: {
        http: {
          servers: {
            edge: {
              listen: [`127.0.0.1:${edgePort}`],
              automatic_https: { disable: true },
              routes: [{ handle: [{ handler: "reverse_proxy", upstreams: [{ dial: "10.0.0.2:8000" }] }] }],
            },
          },
        },
      },
    }),
  );
  caddy = spawn("ip", ["netns", "exec", ns.name, "caddy", "run", "--config", caddyFile], {
    stdio: "ignore",
    env: { ...process.env, HOME: caddyDir, XDG_DATA_HOME: caddyDir, XDG_CONFIG_HOME: caddyDir },
  });
  await new Promise((r) => setTimeout(r, 1500));

  // The load runs inside the namespace (the box network exists only there).
  const load = () =>
    run(
      "ip",
      [
        "netns",
        "exec",
        ns.name,
        process.execPath,
        "-e",
        LOAD_CLIENT,
        String(edgePort),
        String(values.concurrency),
        String(Number(values.seconds) * 1000),
      ],
      { timeoutMs: 120_000 },
    ).then((out) => JSON.parse(out) as { ok: number; failed: number; seconds: number });
  const rps: Record<"with" | "without", number[]> = { with: [], without: [] };
  await load(); // warm-up
  for (let r = 0; r < Number(values.rounds); r++) {
    for (const mode of ["with", "without"] as const) {
      if (mode === "with") await network.ensureBridge();
      else await run("ip", ["netns", "exec", ns.name, "nft", "-f", "-"], { input: removeTablesScript() });
      const res = await load();
      if (res.failed > 0 || res.ok === 0)
        throw new Error(`${mode}: ${res.failed} failed of ${res.ok + res.failed}`);
      rps[mode].push(res.ok / res.seconds);
    }
  }
  await network.ensureBridge();
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(
    `throughput: site GET through Caddy to a QEMU (TCG) guest, ${values.rounds} alternating rounds of ${values.seconds} s, concurrency ${values.concurrency}`,
  );
  console.log(
    `  with firewall    ${rps.with.map((x) => x.toFixed(0)).join(" / ")} req/s (mean ${mean(rps.with).toFixed(0)})`,
  );
  console.log(
    `  without          ${rps.without.map((x) => x.toFixed(0)).join(" / ")} req/s (mean ${mean(rps.without).toFixed(0)})`,
  );
  console.log(`  ratio with/without ${(mean(rps.with) / mean(rps.without)).toFixed(3)}`);
  rmSync(caddyDir, { recursive: true, force: true });
} finally {
  if (caddy?.pid) process.kill(caddy.pid, "SIGTERM");
  if (ex)
    for (const { slug } of await ex.list())
      await ex.remove(slug, new RecordingReporter()).catch(() => undefined);
  ns.destroy();
  rmSync(dataDir, { recursive: true, force: true });
}

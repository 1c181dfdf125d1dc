import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { appendFile, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import type { LogBatch } from "@doppio/contracts";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpControlPlane } from "../../src/control-plane.ts";
import { rotateSerialLog } from "../../src/logs/rotate.ts";
import { LogShipper } from "../../src/logs/shipper.ts";
import { waitReady } from "../../src/vmm/qemu/ready.ts";
import {
  startAgent,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
  waitForHeartbeat,
} from "../support/agent-harness.ts";

const log = pino({ level: process.env.DOPPIO_TEST_LOG ?? "silent" });
const CAP = 4096;
const line = (i: number) => `line-${String(i).padStart(6, "0")} ${"x".repeat(48)}`;

/**
 * A stand-in for the VMM: another process that opens the serial log once with O_APPEND and
 * keeps writing to that descriptor, as QEMU (`append=on`) and Firecracker do. On "N\n" it
 * appends N whole lines (one write each) and answers "ok"; on "flood N" it writes N lines
 * as fast as it can.
 */
class Writer {
  #next = 0;
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #answers: AsyncIterableIterator<string>;

  constructor(file: string) {
    const script = `
      const fs = require("node:fs");
      const fd = fs.openSync(process.argv[1], "a");
      let i = 0;
      const line = (i) => "line-" + String(i).padStart(6, "0") + " " + "x".repeat(48) + "\\n";
      require("node:readline").createInterface({ input: process.stdin }).on("line", (cmd) => {
        const [word, n] = cmd.split(" ");
        const count = Number(word === "flood" ? n : word);
        for (let k = 0; k < count; k++) fs.writeSync(fd, line(i++));
        process.stdout.write("ok\\n");
      });`;
    this.#child = spawn(process.execPath, ["-e", script, file]);
    this.#answers = createInterface({ input: this.#child.stdout })[Symbol.asyncIterator]();
  }

  get written(): number {
    return this.#next;
  }

  async write(n: number, flood = false): Promise<void> {
    this.#child.stdin.write(flood ? `flood ${n}\n` : `${n}\n`);
    this.#next += n;
    await this.#answers.next();
  }

  close(): void {
    this.#child.kill();
  }
}

describe("serial log cap and rotation, shipped to the real control plane", () => {
  let cp: TestCp;
  let a: TestAgent;
  let dir: string;
  let http: HttpControlPlane;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "doppio-rotate-"));
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken });
    http = new HttpControlPlane(cp.url, cp.agentToken, 5_000);
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    http?.close();
    await a?.close();
    await cp?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const box = async (name: string) => {
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name })).status).toBe(202);
    await waitForBox(cp, name, "running");
  };
  const texts = async (slug: string): Promise<string[]> =>
    (await cp.admin.get(`/api/v1/boxes/${slug}/logs?tail=5000`)).body.lines.map(
      (l: { text: string }) => l.text,
    );
  const sizes = async (file: string) => ({
    log: (await stat(file)).size,
    rotated: await stat(`${file}.1`).then(
      (s) => s.size,
      () => 0,
    ),
  });
  const shipper = (slug: string, file: string, ship = (s: string, b: LogBatch) => http.shipLogs(s, b)) =>
    new LogShipper({
      slugs: () => [slug],
      serialLog: () => file,
      ship,
      now: () => new Date(),
      log,
      maxLogBytes: CAP,
    });

  it("keeps the file under its cap and ships every line once, across rotations and an agent restart", async () => {
    await box("rotating");
    const file = path.join(dir, "rotating.log");
    const writer = new Writer(file);
    try {
      await writer.write(1);
      // Lines the guest writes while a batch is in flight land after the pass's stat: they
      // must come out of the rotated copy, not be lost with the truncate.
      let midPass = true;
      const s = shipper("rotating", file, async (slug, batch) => {
        const ack = await http.shipLogs(slug, batch);
        if (midPass && batch.lines.length > 0) await writer.write(7);
        return ack;
      });
      let rotations = 0;
      for (let round = 0; round < 25; round++) {
        await writer.write(40); // ~2.6 KB a round: the 4 KiB cap is crossed every other round
        const before = (await stat(file)).size;
        await s.shipOnce();
        const after = await sizes(file);
        if (after.log < before) rotations++;
        expect(after.log).toBeLessThanOrEqual(CAP);
        expect(after.rotated).toBeLessThanOrEqual(CAP + 7 * 64);
      }
      midPass = false;
      expect(rotations).toBeGreaterThanOrEqual(10);
      await s.shipOnce();
      const all = Array.from({ length: writer.written }, (_, i) => line(i));
      expect(await texts("rotating")).toEqual(all);

      // A new shipper (agent restart) continues the rotated file's epoch: nothing again, the next lines once.
      const restarted = shipper("rotating", file);
      expect(await restarted.shipOnce()).toBe(0);
      await writer.write(3);
      expect(await restarted.shipOnce()).toBe(3);
      expect(await texts("rotating")).toEqual(Array.from({ length: writer.written }, (_, i) => line(i)));
    } finally {
      writer.close();
    }
  });

  it("a box flooding its console while the loop runs: bounded on disk, no line twice or out of order", async () => {
    await box("flooding");
    const file = path.join(dir, "flooding.log");
    const writer = new Writer(file);
    await writer.write(1);
    // A flood the shipper can keep up with (~0.5 MB/s): what is lost then is only what lands
    // between a rotation's last copy and its truncate.
    const cap = 64 * 1024;
    const s = new LogShipper({
      slugs: () => ["flooding"],
      serialLog: () => file,
      ship: (slug, b) => http.shipLogs(slug, b),
      now: () => new Date(),
      log,
      maxLogBytes: cap,
    });
    let largest = 0;
    let rotations = 0;
    let last = 0;
    const sampler = setInterval(() => {
      sizes(file).then(
        (n) => {
          largest = Math.max(largest, n.log + n.rotated);
          if (n.log < last) rotations++;
          last = n.log;
        },
        () => undefined,
      );
    }, 5);
    try {
      s.start();
      for (let i = 0; i < 40; i++) {
        await writer.write(100, true); // 4000 lines, ~260 KB
        await new Promise((r) => setTimeout(r, 10));
      }
      await new Promise((r) => setTimeout(r, 300));
      await writer.write(1); // a last line once the flood is over
      await waitFor("the last line", async () => (await texts("flooding")).at(-1) === line(4001));
    } finally {
      clearInterval(sampler);
      await s.stop();
      writer.close();
    }
    const lines = await texts("flooding");
    expect(lines.filter((t) => !/^line-\d{6} x{48}$/.test(t))).toEqual([]);
    const got = lines.map((t) => Number(t.slice(5, 11)));
    for (let i = 1; i < got.length; i++) expect(got[i]!, `after ${got[i - 1]}`).toBeGreaterThan(got[i - 1]!);
    const lost = 4002 - got.length;
    // Lines are lost only when written between a rotation's last copy and its truncate: at
    // most one contiguous run per rotation. How long a run is depends on how long that window
    // lasts on a loaded host (one run of 100 lines was seen in CI), so only runs are bounded.
    const lostRuns = got.filter((n, i) => n !== (i === 0 ? 0 : got[i - 1]! + 1)).length;
    console.info(
      `flood: ${rotations} rotations seen, ${lost} of 4002 lines lost in ${lostRuns} runs, at most ${largest} bytes on disk`,
    );
    expect(rotations).toBeGreaterThanOrEqual(2);
    expect(lostRuns).toBeLessThanOrEqual(rotations);
    // The log and its rotated copy: two caps plus what arrives between a write and its check.
    expect(largest).toBeLessThanOrEqual(3 * cap);
  });
});

describe("a rotation during a box start", () => {
  it("does not hide DOPPIO-READY from the executor's wait (it reads the rotated log from its start)", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-rotate-ready-"));
    try {
      const file = path.join(dir, "serial.log");
      await writeFile(file, "x".repeat(8000));
      const ready = waitReady(file, 8000, 7, 5_000, async () => true);
      await appendFile(file, "booting\n");
      const st = await stat(file);
      await rotateSerialLog(file, {
        birthtimeMs: st.birthtimeMs,
        epoch: 1,
        keepBytes: 4096,
        nowMs: Date.now(),
      });
      await appendFile(file, "DOPPIO-READY 7\n");
      await ready;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

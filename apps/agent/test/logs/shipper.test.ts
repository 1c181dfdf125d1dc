import { appendFile, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { LOG_LINE_MAX } from "@doppio/contracts";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpControlPlane } from "../../src/control-plane.ts";
import { splitSerialLines } from "../../src/logs/serial-lines.ts";
import { LogShipper, READ_MAX } from "../../src/logs/shipper.ts";
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

describe("serial log lines", () => {
  it("splits complete lines with their offsets and tells service lines from the console", () => {
    const text =
      "[    0.1] Linux\r\n[svc bench] 12:00 web.1 | started\n\x1b[32mgreen\x1b[0m\x07\n\n[svc code-server] x";
    const { lines, end } = splitSerialLines(Buffer.from(text), 100, false);
    expect(lines).toEqual([
      { offset: 100, source: "console", text: "[    0.1] Linux" },
      { offset: 117, source: "bench", text: "12:00 web.1 | started" },
      { offset: 151, source: "console", text: "\x1b[32mgreen\x1b[0m" },
    ]);
    // The blank line is consumed; the unterminated service line waits for its newline.
    expect(end).toBe(100 + text.lastIndexOf("\n") + 1);
  });

  it("cuts a line longer than one read, and keeps multi-byte text intact", () => {
    const long = Buffer.from("x".repeat(READ_MAX));
    const cut = splitSerialLines(long, 0, true);
    expect(cut.end).toBe(READ_MAX);
    expect(cut.lines[0]!.text).toHaveLength(LOG_LINE_MAX);
    expect(splitSerialLines(Buffer.from("héllo ✓\n"), 0, false).lines[0]!.text).toBe("héllo ✓");
    // A name that is not a service name stays on the console.
    expect(splitSerialLines(Buffer.from("[svc BAD NAME] x\n"), 0, false).lines[0]!.source).toBe("console");
  });
});

describe("log shipping to the real control plane", () => {
  let cp: TestCp;
  let a: TestAgent;
  let serialDir: string;

  beforeAll(async () => {
    serialDir = await mkdtemp(path.join(tmpdir(), "doppio-serial-"));
    cp = await startCp();
    a = await startAgent({ cpUrl: cp.url, token: cp.agentToken, fake: { serialDir } });
    await waitForHeartbeat(cp);
  });
  afterAll(async () => {
    await a?.close();
    await cp?.close();
    await rm(serialDir, { recursive: true, force: true });
  });

  const texts = async (slug: string, query = "") =>
    (await cp.admin.get(`/api/v1/boxes/${slug}/logs?tail=5000${query}`)).body.lines.map(
      (l: { source: string; text: string }) => `${l.source}: ${l.text}`,
    );

  it("follows a running box's serial log: console and service lines arrive as they are written", async () => {
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "logged" })).status).toBe(202);
    await waitForBox(cp, "logged", "running");
    const file = path.join(serialDir, "logged.log");
    await writeFile(file, "Booting\n[svc bench] web.1 | * Running on http://0.0.0.0:8000\n");
    await waitFor("the first lines", async () => (await texts("logged")).length === 2);
    await appendFile(file, "[svc code-server] listening on 8888\npartial");
    await waitFor("the third line", async () => (await texts("logged")).length === 3);
    expect(await texts("logged")).toEqual([
      "console: Booting",
      "bench: web.1 | * Running on http://0.0.0.0:8000",
      "code-server: listening on 8888",
    ]);
    await appendFile(file, " line\n");
    await waitFor(
      "the completed line",
      async () => (await texts("logged")).at(-1) === "console: partial line",
    );
    expect(await texts("logged", "&source=bench")).toEqual([
      "bench: web.1 | * Running on http://0.0.0.0:8000",
    ]);
  });

  it("sends nothing twice and loses nothing across a restarted shipper and a control-plane outage", async () => {
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "durable" })).status).toBe(202);
    await waitForBox(cp, "durable", "running");
    // Ship this box by hand: the agent's own shipper does not know the file's directory.
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-serial-"));
    const file = path.join(dir, "durable.log");
    const http = new HttpControlPlane(cp.url, cp.agentToken, 5_000);
    let down = false;
    const shipper = () =>
      new LogShipper({
        slugs: () => ["durable"],
        serialLog: () => file,
        ship: (slug, batch) =>
          down ? Promise.reject(new Error("control plane down")) : http.shipLogs(slug, batch),
        now: () => new Date(),
        log,
      });
    try {
      await writeFile(file, Array.from({ length: 10 }, (_, i) => `a${i}\n`).join(""));
      expect(await shipper().shipOnce()).toBe(10);
      // A fresh shipper (agent restart) starts where the control plane stopped.
      await appendFile(file, "b0\nb1\n");
      const second = shipper();
      expect(await second.shipOnce()).toBe(2);
      down = true;
      await appendFile(file, "c0\n");
      await expect(second.shipOnce()).rejects.toThrow(/down/);
      down = false;
      expect(await second.shipOnce()).toBe(1);
      expect(await second.shipOnce()).toBe(0);
      expect(await texts("durable")).toEqual([
        ...Array.from({ length: 10 }, (_, i) => `console: a${i}`),
        "console: b0",
        "console: b1",
        "console: c0",
      ]);
    } finally {
      http.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("ships a write as soon as it happens, not at the next poll (inotify wakes the loop)", async () => {
    expect((await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "watched" })).status).toBe(202);
    await waitForBox(cp, "watched", "running");
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-serial-"));
    const file = path.join(dir, "watched.log");
    const http = new HttpControlPlane(cp.url, cp.agentToken, 5_000);
    await writeFile(file, "first\n");
    // A poll interval far longer than the wait below: only the watch can deliver in time.
    const shipper = new LogShipper(
      {
        slugs: () => ["watched"],
        serialLog: () => file,
        ship: (slug, batch) => http.shipLogs(slug, batch),
        now: () => new Date(),
        log,
      },
      { intervalMs: 600_000 },
    );
    try {
      shipper.start();
      await waitFor("the first line", async () => (await texts("watched")).length === 1, 10_000);
      await appendFile(file, "second\n");
      await waitFor("the appended line", async () => (await texts("watched")).length === 2, 10_000);
      expect(await texts("watched")).toEqual(["console: first", "console: second"]);
    } finally {
      await shipper.stop();
      http.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("skips boxes the control plane does not know", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-serial-"));
    const http = new HttpControlPlane(cp.url, cp.agentToken, 5_000);
    try {
      await writeFile(path.join(dir, "stranger.log"), "who\n");
      const shipper = new LogShipper({
        slugs: () => ["stranger"],
        serialLog: (slug) => path.join(dir, `${slug}.log`),
        ship: (slug, batch) => http.shipLogs(slug, batch),
        now: () => new Date(),
        log,
      });
      expect(await shipper.shipOnce()).toBe(0);
      await appendFile(path.join(dir, "stranger.log"), "still nobody\n");
      expect(await shipper.shipOnce()).toBe(0);
    } finally {
      http.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

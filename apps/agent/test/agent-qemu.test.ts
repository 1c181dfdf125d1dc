import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { logOnlyReporter } from "../src/jobs/reporter.ts";
import type { LinuxHostNetwork } from "../src/net/host-network.ts";
import type { QemuExecutor } from "../src/vmm/qemu/executor.ts";
import { buildMinimalImage, qemuUnavailable } from "./qemu/support.ts";
import {
  API_TOKEN,
  boxJobs,
  startCp,
  type TestAgent,
  type TestCp,
  waitFor,
  waitForBox,
} from "./support/agent-harness.ts";
import { TestNetns } from "./support/netns.ts";
import { startQemuAgent } from "./support/qemu-agent.ts";

const missing = qemuUnavailable();
if (missing) console.warn(`SKIPPING agent + real QEMU end-to-end test: ${missing}`);

/**
 * The whole path with the real VMM: control plane → claim → agent handlers → QEMU executor
 * (TCG here) → a guest answering on its own address inside a test-owned netns.
 */
describe.skipIf(missing !== null)("agent with the real QEMU executor", () => {
  let cp: TestCp;
  let a: TestAgent;
  let ns: TestNetns;
  let executor: QemuExecutor;
  let network: LinuxHostNetwork;

  beforeAll(async () => {
    buildMinimalImage("agent-e2e");
    ns = TestNetns.create("dbxa");
    cp = await startCp();
    ({ a, executor, network } = await startQemuAgent(cp, ns, "agent-e2e"));
  }, 300_000);
  afterAll(async () => {
    if (executor) {
      const report = logOnlyReporter({ now: () => new Date() }, a.agent.metrics, a.agent.api.log as never);
      for (const { slug } of await executor.list())
        await executor.remove(slug, report).catch(() => undefined);
    }
    await a?.close();
    await cp?.close();
    ns?.destroy();
  });

  it("builds the golden snapshot through the agent API", async () => {
    const res = await fetch(`${a.apiUrl}/golden-snapshot/build`, {
      method: "POST",
      headers: { authorization: `Bearer ${API_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ template: "minimal" }),
    });
    expect(res.status).toBe(202);
    await waitFor(
      "golden ready",
      async () => (await executor.goldenStatus("minimal")).status === "ready",
      240_000,
      500,
    );
  }, 300_000);

  it("creates a box from it: running, answering on its own address, steps recorded", async () => {
    await cp.admin.post("/api/v1/boxes", { template: "minimal", name: "real-one" });
    const box = await waitForBox(cp, "real-one", "running", 120_000);
    expect(box.ip).toBe("10.0.0.2");
    expect(ns.curl("http://10.0.0.2:8000/").trim()).toBe("real-one");
    expect(a.routes.get("real-one")?.upstream(8888)).toBe("10.0.0.2:8888");
    const [job] = await boxJobs(cp, "real-one");
    expect(job.status).toBe("succeeded");
    expect(job.steps.map((s: { name: string }) => s.name)).toContain("restore_vm");
    // The guest's serial console reaches the control plane as the box's live log.
    const logged = await waitFor(
      "the guest's ready line in the box log",
      async () => {
        const page = await cp.admin.get("/api/v1/boxes/real-one/logs?tail=500");
        return page.body.lines.find((l: { text: string }) => /^DOPPIO-READY \d+$/.test(l.text));
      },
      10_000,
      200,
    );
    expect(logged.source).toBe("console");
  }, 150_000);

  it("hibernate after its VMM was killed: stopped, TAP and process gone, disks kept, the job says why", async () => {
    expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data", "kept-after-the-crash").trim()).toBe("stored");
    const dir = join(a.dataDir, "qemu", "boxes", "real-one");
    const pid = Number(readFileSync(join(dir, "qemu.pid"), "utf8").trim());
    const tap = (await network.listTaps())[0]!;
    process.kill(pid, "SIGKILL");
    await waitFor("VMM gone", async () => (await executor.inspect("real-one")) === "exited", 10_000);
    expect((await cp.admin.post("/api/v1/boxes/real-one/hibernate")).status).toBe(202);
    const box = await waitForBox(cp, "real-one", "stopped", 60_000);
    expect(box).toMatchObject({ desiredState: "stopped", memoryFileBytes: null, ip: "10.0.0.2" });
    expect(box.statusReason).toMatch(/VMM had already exited/);
    const [job] = await boxJobs(cp, "real-one");
    expect(job).toMatchObject({ action: "hibernate", status: "succeeded", result: { memoryFileBytes: 0 } });
    expect(job.result.memoryLost).toMatch(/no memory to keep/);
    expect(job.steps[0]).toMatchObject({ name: "check_state", detail: expect.stringMatching(/exited/) });
    expect(await executor.inspect("real-one")).toBe("stopped");
    expect(await network.listTaps()).not.toContain(tap);
    expect(existsSync(join(dir, "qemu.pid"))).toBe(false);
    expect(existsSync(join(dir, "qmp.sock"))).toBe(false);
    expect(existsSync(join(dir, "memory.vmstate"))).toBe(false);
    expect(existsSync(join(dir, "memory.vmstate.partial"))).toBe(false);
    // Reconcile leaves it stopped (its desired state); a start boots its disks, data intact.
    await a.agent.reconciler.reconcileOnce();
    expect(await executor.inspect("real-one")).toBe("stopped");
    await cp.admin.post("/api/v1/boxes/real-one/start");
    await waitForBox(cp, "real-one", "running", 120_000);
    const [start] = await boxJobs(cp, "real-one");
    expect(start.steps.map((s: { name: string }) => s.name)).toContain("boot_vm");
    await waitFor(
      "guest answers after start",
      () => ns.curl("http://10.0.0.2:8000/").trim() === "real-one",
      60_000,
      1000,
    );
    expect(ns.curl("http://10.0.0.2:8000/cgi-bin/data").trim()).toBe("kept-after-the-crash");
  }, 300_000);

  it("stops and starts the box, restarts it after its VMM dies, then deletes it", async () => {
    await cp.admin.post("/api/v1/boxes/real-one/stop");
    await waitForBox(cp, "real-one", "stopped", 60_000);
    expect(await executor.inspect("real-one")).toBe("stopped");
    await cp.admin.post("/api/v1/boxes/real-one/start");
    await waitForBox(cp, "real-one", "running", 120_000);
    await waitFor(
      "guest answers after start",
      () => ns.curl("http://10.0.0.2:8000/").trim() === "real-one",
      60_000,
      1000,
    );

    // The VMM dies (SIGKILL by its pid file): reconcile starts it again from its disks.
    const pid = Number(readFileSync(join(a.dataDir, "qemu", "boxes", "real-one", "qemu.pid"), "utf8").trim());
    process.kill(pid, "SIGKILL");
    await waitFor("VMM gone", async () => (await executor.inspect("real-one")) !== "running", 10_000);
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([{ kind: "restarted", slug: "real-one" }]);
    expect(await executor.inspect("real-one")).toBe("running");
    await waitFor(
      "guest answers after reconcile",
      () => ns.curl("http://10.0.0.2:8000/").trim() === "real-one",
      60_000,
      1000,
    );

    // Someone flushes the isolation firewall's anti-spoofing chain: the next reconcile pass
    // writes both tables back whole, with the running box's entry.
    ns.exec("nft", ["flush", "chain", "bridge", "doppio", "from_box"]);
    expect(ns.exec("nft", ["list", "chain", "bridge", "doppio", "from_box"])).not.toContain("@ports");
    expect(await a.agent.reconciler.reconcileOnce()).toEqual([]);
    expect(ns.exec("nft", ["list", "chain", "bridge", "doppio", "from_box"])).toContain("@ports accept");
    expect(ns.exec("nft", ["list", "set", "bridge", "doppio", "ports"])).toContain("10.0.0.2");
    expect(ns.curl("http://10.0.0.2:8000/").trim()).toBe("real-one");

    await cp.admin.del("/api/v1/boxes/real-one");
    await waitFor(
      "deleted",
      async () => (await cp.admin.get("/api/v1/boxes/real-one")).status === 404,
      60_000,
    );
    expect(await executor.inspect("real-one")).toBe("gone");
    expect(a.agent.ipPool.get("real-one")).toBeNull();
  }, 300_000);

  it("creates three boxes at once through the control plane, each with its own identity, disk and cleanup", async () => {
    const slugs = ["trio-a", "trio-b", "trio-c"];
    const created = await Promise.all(
      slugs.map((name) => cp.admin.post("/api/v1/boxes", { template: "minimal", name })),
    );
    expect(created.map((r) => r.status)).toEqual([202, 202, 202]);
    const boxes = await Promise.all(slugs.map((slug) => waitForBox(cp, slug, "running", 180_000)));
    const ips = boxes.map((b) => b.ip as string);
    expect(new Set(ips).size).toBe(3);
    const macs = new Set<string>();
    for (const [i, slug] of slugs.entries()) {
      const ip = ips[i]!;
      expect(ns.curl(`http://${ip}:8000/`).trim()).toBe(slug);
      expect(ns.curl(`http://${ip}:8888/`).trim()).toBe(slug);
      const identity = ns.curl(`http://${ip}:8000/cgi-bin/identity`);
      expect(identity).toContain(`hostname=${slug}`);
      macs.add(/mac=(\S+)/.exec(identity)![1]!);
      // What the edge will dial for the site and code URLs.
      expect(a.routes.get(slug)?.upstream(8000)).toBe(`${ip}:8000`);
      expect(a.routes.get(slug)?.upstream(8888)).toBe(`${ip}:8888`);
    }
    expect(macs.size).toBe(3);

    // A file on the volume survives stop/start; reset wipes it and keeps slug, IP and URL.
    const [first] = slugs;
    const ip = ips[0]!;
    expect(ns.curl(`http://${ip}:8000/cgi-bin/data`, "kept-on-the-volume").trim()).toBe("stored");
    await cp.admin.post(`/api/v1/boxes/${first}/stop`);
    await waitForBox(cp, first!, "stopped", 60_000);
    await cp.admin.post(`/api/v1/boxes/${first}/start`);
    await waitForBox(cp, first!, "running", 120_000);
    await waitFor(
      "guest answers after start",
      () => ns.curl(`http://${ip}:8000/`).trim() === first,
      60_000,
      1000,
    );
    expect(ns.curl(`http://${ip}:8000/cgi-bin/data`).trim()).toBe("kept-on-the-volume");
    const urlBefore = (await cp.admin.get(`/api/v1/boxes/${first}`)).body.urls;
    await cp.admin.post(`/api/v1/boxes/${first}/reset`);
    const afterReset = await waitForBox(cp, first!, "running", 120_000);
    expect(afterReset.ip).toBe(ip);
    expect(afterReset.urls).toEqual(urlBefore);
    await waitFor(
      "guest answers after reset",
      () => ns.curl(`http://${ip}:8000/`).trim() === first,
      60_000,
      1000,
    );
    expect(ns.curl(`http://${ip}:8000/cgi-bin/data`).trim()).toBe("(none)");

    // Delete leaves no VM, TAP, disk, socket, IP allocation or route (spec page 12 §8).
    const tapsBefore = await network.listTaps();
    expect(tapsBefore).toHaveLength(3);
    await Promise.all(slugs.map((slug) => cp.admin.del(`/api/v1/boxes/${slug}`)));
    for (const slug of slugs) {
      await waitFor(
        "deleted",
        async () => (await cp.admin.get(`/api/v1/boxes/${slug}`)).status === 404,
        60_000,
      );
      expect(await executor.inspect(slug)).toBe("gone");
      expect(a.agent.ipPool.get(slug)).toBeNull();
      expect(a.routes.get(slug)).toBeUndefined();
      expect(existsSync(join(a.dataDir, "qemu", "boxes", slug))).toBe(false);
    }
    expect(await network.listTaps()).toEqual([]);
  }, 600_000);
});

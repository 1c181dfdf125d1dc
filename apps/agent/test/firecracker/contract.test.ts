import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { FirecrackerClient } from "../../src/vmm/firecracker/api-client.ts";
import { FirecrackerError } from "../../src/vmm/firecracker/errors.ts";
import { ContractValidator, loadDescription } from "./contract.ts";
import { FakeFirecracker } from "./fake-firecracker.ts";

const loaded = loadDescription();
if (!("doc" in loaded)) console.warn(`SKIPPING Firecracker API contract tests: ${loaded.missing}`);

function rawPut(
  socketPath: string,
  urlPath: string,
  body: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { socketPath, method: "PUT", path: urlPath, headers: { "Content-Type": "application/json" } },
      (res) => {
        let text = "";
        res.on("data", (c) => {
          text += c;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe.skipIf(!("doc" in loaded))("contract validator (Firecracker API description v1.16.1)", () => {
  let v: ContractValidator;
  beforeAll(() => {
    if ("doc" in loaded) v = new ContractValidator(loaded.doc);
  });

  it("is the v1.16.1 description", () => {
    expect(v.version).toBe("1.16.1");
    expect(v.definitionNames()).toEqual(
      expect.arrayContaining(["SnapshotLoadParams", "MmdsConfig", "Drive"]),
    );
  });

  it("accepts a valid drive and rejects a wrong-typed one", () => {
    const ok = {
      drive_id: "rootfs",
      path_on_host: "/rootfs.ext4",
      is_root_device: true,
      is_read_only: false,
    };
    expect(v.validateRequest("PUT", "/drives/rootfs", JSON.stringify(ok)).ok).toBe(true);
    const bad = v.validateRequest("PUT", "/drives/rootfs", JSON.stringify({ ...ok, is_root_device: "yes" }));
    expect(bad).toMatchObject({ ok: false, error: expect.stringMatching(/is_root_device must be boolean/) });
  });

  it("rejects missing required fields, bad enums, unknown paths and methods", () => {
    expect(v.validateRequest("PUT", "/snapshot/load", JSON.stringify({ resume_vm: false }))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/snapshot_path/),
    });
    expect(
      v.validateRequest(
        "PUT",
        "/snapshot/create",
        JSON.stringify({ snapshot_path: "/s", mem_file_path: "/m", snapshot_type: "Partial" }),
      ).ok,
    ).toBe(false);
    expect(v.validateRequest("PATCH", "/vm", JSON.stringify({ state: "Stopped" })).ok).toBe(false);
    expect(
      v.validateRequest(
        "PUT",
        "/mmds/config",
        JSON.stringify({ version: "V3", network_interfaces: ["eth0"] }),
      ).ok,
    ).toBe(false);
    expect(v.validateRequest("PUT", "/nope", "{}").ok).toBe(false);
    expect(v.validateRequest("DELETE", "/vm", "").ok).toBe(false);
    expect(v.validateRequest("PUT", "/actions", "").ok).toBe(false);
    expect(v.validateRequest("PUT", "/actions", "{not json").ok).toBe(false);
  });

  it("checks formats the description declares (int64, the MMDS link-local address)", () => {
    const iface = {
      iface_id: "eth0",
      host_dev_name: "tap0",
      rx_rate_limiter: { bandwidth: { size: 1, refill_time: 1.5 } },
    };
    expect(v.validateRequest("PUT", "/network-interfaces/eth0", JSON.stringify(iface)).ok).toBe(false);
    const mmds = (ip: string) => JSON.stringify({ network_interfaces: ["eth0"], ipv4_address: ip });
    expect(v.validateRequest("PUT", "/mmds/config", mmds("169.254.169.254")).ok).toBe(true);
    expect(v.validateRequest("PUT", "/mmds/config", mmds("10.0.0.1")).ok).toBe(false);
  });

  it("keeps additionalProperties as written: free-form MMDS, undeclared fields rejected elsewhere", () => {
    expect(
      v.validateRequest("PUT", "/mmds", JSON.stringify({ latest: { anything: [1, { a: true }] } })).ok,
    ).toBe(true);
    const typo = {
      snapshot_path: "/s",
      mem_backend: { backend_type: "File", backend_path: "/m" },
      enable_diff_snapshot: false,
    };
    expect(v.validateRequest("PUT", "/snapshot/load", JSON.stringify(typo))).toMatchObject({
      ok: false,
      error: expect.stringMatching(/enable_diff_snapshot/),
    });
    const lenient =
      "doc" in loaded ? new ContractValidator(loaded.doc, { rejectUndeclaredFields: false }) : v;
    expect(lenient.validateRequest("PUT", "/snapshot/load", JSON.stringify(typo)).ok).toBe(true);
  });
});

describe.skipIf(!("doc" in loaded))("typed client against the contract server", () => {
  let dir: string;
  let fake: FakeFirecracker | null = null;
  let client: FirecrackerClient;
  let v: ContractValidator;

  beforeAll(() => {
    if ("doc" in loaded) v = new ContractValidator(loaded.doc);
    dir = mkdtempSync(path.join(tmpdir(), "fc-contract-"));
  });
  afterEach(async () => {
    await fake?.close();
    fake = null;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const start = async (name: string) => {
    const socket = path.join(dir, `${name}.sock`);
    fake = await FakeFirecracker.listen(socket, v, { id: name });
    client = new FirecrackerClient(socket, { timeoutMs: 2_000 });
    return fake;
  };

  it("answers an invalid body with 400 and a fault_message the client surfaces", async () => {
    const f = await start("bad-body");
    const raw = await rawPut(
      f.socketPath,
      "/machine-config",
      JSON.stringify({ vcpu_count: "two", mem_size_mib: 512 }),
    );
    expect(raw.status).toBe(400);
    expect(JSON.parse(raw.body)).toEqual({
      fault_message: expect.stringMatching(/vcpu_count must be integer/),
    });
    const err = await client.putMachineConfig({ vcpu_count: 0, mem_size_mib: 512 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FirecrackerError);
    expect(err).toMatchObject({ code: "api_rejected", status: 400, request: "PUT /machine-config" });
    expect((err as FirecrackerError).faultMessage).toMatch(/vcpu_count must be >= 1/);
    expect(f.responseProblems).toEqual([]);
  });

  it("accepts every call the client makes on a cold boot, and enforces pre-boot ordering", async () => {
    const f = await start("cold");
    await client.putLogger({ log_path: "/firecracker.log", level: "Info" });
    await client.putMetrics({ metrics_path: "/metrics.json" });
    await client.putMachineConfig({
      vcpu_count: 2,
      mem_size_mib: 1024,
      smt: false,
      track_dirty_pages: false,
    });
    await client.putBootSource({ kernel_image_path: "/vmlinux", boot_args: "console=ttyS0" });
    await client.putDrive({
      drive_id: "rootfs",
      path_on_host: "/rootfs.ext4",
      is_root_device: true,
      is_read_only: false,
    });
    // MMDS may only name interfaces that exist.
    await expect(client.putMmdsConfig({ version: "V2", network_interfaces: ["eth0"] })).rejects.toMatchObject(
      {
        faultMessage: expect.stringMatching(/eth0/),
      },
    );
    await client.putNetworkInterface({
      iface_id: "eth0",
      host_dev_name: "tap0",
      guest_mac: "06:00:00:00:00:01",
    });
    await client.putEntropy({});
    await client.putBalloon({ amount_mib: 0, deflate_on_oom: true });
    await client.putMmdsConfig({ version: "V2", network_interfaces: ["eth0"] });
    await client.putMmds({ latest: { "meta-data": { devbox: { slug: "x" } } } });
    await client.patchMmds({ extra: 1 });
    expect(await client.getMmds()).toEqual({ latest: { "meta-data": { devbox: { slug: "x" } } }, extra: 1 });
    await client.action("InstanceStart");
    expect((await client.describeInstance()).state).toBe("Running");
    await expect(client.putBootSource({ kernel_image_path: "/vmlinux" })).rejects.toMatchObject({
      code: "api_rejected",
      faultMessage: expect.stringMatching(/after starting/),
    });
    await expect(
      client.createSnapshot({ snapshot_path: "/s", mem_file_path: "/m", snapshot_type: "Full" }),
    ).rejects.toMatchObject({
      faultMessage: expect.stringMatching(/not paused/),
    });
    await client.patchVm("Paused");
    await client.createSnapshot({ snapshot_path: "/s", mem_file_path: "/m", snapshot_type: "Full" });
    await client.patchVm("Resumed");
    await client.patchBalloon({ amount_mib: 128 });
    await client.action("FlushMetrics");
    expect((await client.version()).firecracker_version).toBe("1.16.1");
    expect(f.responseProblems).toEqual([]);
  });

  it("allows a snapshot load only on a fresh process", async () => {
    const load = {
      snapshot_path: "/snapshot/vmstate",
      mem_backend: { backend_type: "File" as const, backend_path: "/snapshot/mem" },
      track_dirty_pages: false,
      resume_vm: false,
    };
    const f = await start("load-late");
    await client.putMachineConfig({ vcpu_count: 1, mem_size_mib: 256 });
    await expect(client.loadSnapshot(load)).rejects.toMatchObject({
      faultMessage: expect.stringMatching(/not allowed/),
    });
    await f.close();
    fake = null;
    const g = await start("load-fresh");
    await client.putLogger({ log_path: "/firecracker.log" });
    await client.loadSnapshot(load);
    expect((await client.describeInstance()).state).toBe("Paused");
    expect(g.calls()).toEqual(["PUT /logger", "PUT /snapshot/load"]);
  });

  it("reports an unreachable socket as api_unreachable", async () => {
    const c = new FirecrackerClient(path.join(dir, "nobody.sock"), { timeoutMs: 500 });
    await expect(c.version()).rejects.toMatchObject({ code: "api_unreachable", request: "GET /version" });
  });
});

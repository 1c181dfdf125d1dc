import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { boxUrls } from "@doppio/contracts";
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { poolLayout } from "../src/cidr.ts";
import { systemClock } from "../src/clock.ts";
import { MemoryRouteTable } from "../src/edge/routes.ts";
import { boxRecord, freshSecrets, specFromPayload, vmSpec } from "../src/jobs/handlers/common.ts";
import type { HandlerDeps } from "../src/jobs/registry.ts";
import { BoxStore } from "../src/store/boxes.ts";
import { openStore } from "../src/store/db.ts";
import { IpPool } from "../src/store/ip-pool.ts";
import { boxPayload, testConfig } from "./support/agent-harness.ts";
import { FakeExecutor } from "./support/fake-executor.ts";

const dataDir = mkdtempSync(join(tmpdir(), "doppio-urls-"));
const db = openStore(dataDir);
afterAll(() => {
  db.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The URLs a guest is told at boot (its metadata), under one host's public address settings. */
function guestUrls(slug: string, host: Record<string, unknown>) {
  const config = testConfig({ controlPlaneUrl: "http://127.0.0.1:9", dataDir, ...host });
  const fake = new FakeExecutor();
  const deps: HandlerDeps = {
    config,
    executor: fake,
    network: fake,
    ipPool: new IpPool(db, poolLayout(config.bridge.cidr)),
    boxes: new BoxStore(db),
    routes: new MemoryRouteTable(),
    imageBuilder: null,
    images: null,
    clock: systemClock,
    log: pino({ level: "silent" }),
  };
  const spec = specFromPayload(boxPayload(slug), freshSecrets());
  const { metadata } = vmSpec(deps, boxRecord(deps, slug, "10.0.0.2", spec, null), 1);
  return { site: metadata.site_url, code: metadata.code_url };
}

describe("a box's URLs: the guest is told the ones the control plane shows (contracts' boxUrls)", () => {
  it("https on the default port", () => {
    const urls = guestUrls("demo", { domain: "fc-01.example.com" });
    expect(urls).toEqual({
      site: "https://demo.site.fc-01.example.com",
      code: "https://demo.code.fc-01.example.com",
    });
    expect(urls).toEqual({
      site: boxUrls("demo", "fc-01.example.com").site,
      code: boxUrls("demo", "fc-01.example.com").code,
    });
  });

  it("local mode: http on port 8088, and no port when it is the scheme's default", () => {
    expect(guestUrls("demo", { domain: "localhost", publicScheme: "http", publicPort: 8088 })).toEqual({
      site: "http://demo.site.localhost:8088",
      code: "http://demo.code.localhost:8088",
    });
    expect(guestUrls("demo", { domain: "localhost", publicScheme: "http", publicPort: 80 }).site).toBe(
      "http://demo.site.localhost",
    );
  });
});

import { DEFAULT_TEMPLATE, TEMPLATES } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCp, type TestCp, testConfig } from "./support/agent-harness.ts";

describe("one template list (packages/contracts/src/templates.ts) for the control plane and the agent", () => {
  let cp: TestCp;
  beforeAll(async () => {
    cp = await startCp();
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("is the control plane's catalog: names, titles, versions and default sizes, the default first", async () => {
    const res = await cp.admin.get("/api/v1/templates");
    expect(res.status).toBe(200);
    const listed = res.body.templates.map((t: any) => [
      t.name,
      t.title,
      t.description,
      t.version,
      t.defaultSize,
    ]);
    // The catalog lists the default template first, then by name.
    const order = (t: { isDefault: boolean; name: string }) => `${t.isDefault ? 0 : 1}${t.name}`;
    const catalog = [...TEMPLATES].sort((a, b) => order(a).localeCompare(order(b)));
    expect(listed).toEqual(catalog.map((t) => [t.name, t.title, t.description, t.version, t.boxSize]));
    expect(listed[0][0]).toBe(DEFAULT_TEMPLATE);
  });

  it("fills the agent's template config: version, ready ports, memory and vCPUs, and the default template", () => {
    const config = testConfig({
      controlPlaneUrl: "http://127.0.0.1:9",
      dataDir: "/tmp/unused",
      templates: TEMPLATES.map((t) => ({ name: t.name })),
    });
    expect(config.templates).toEqual(
      TEMPLATES.map((t) => ({
        name: t.name,
        version: t.version,
        readyPorts: t.readyPorts,
        memoryMb: t.memoryMb,
        vcpu: t.vcpu,
      })),
    );
    const defaults = testConfig({ controlPlaneUrl: "http://127.0.0.1:9", dataDir: "/tmp/unused" });
    expect(defaults.defaultTemplate).toBe(DEFAULT_TEMPLATE);
    expect(defaults.templates.map((t) => t.name)).toEqual([DEFAULT_TEMPLATE]);
  });
});

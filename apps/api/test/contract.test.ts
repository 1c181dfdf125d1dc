import { type Route, routes } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";

/**
 * The route contract (packages/contracts/src/routes.ts) is the one list of the API's
 * routes: the control plane serves each of them and documents no route outside it. The
 * database plays no part in which routes exist, so this runs on PGlite only.
 */
describe("route contract", () => {
  let cp: TestControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane();
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("is served route for route by the control plane", () => {
    for (const [name, route] of Object.entries(routes) as [string, Route][]) {
      expect(cp.cp.app.hasRoute({ method: route.method, url: route.path }), name).toBe(true);
    }
  });

  it("lists every route /openapi.json documents", async () => {
    const doc = (await new TestClient(cp.url).get("/openapi.json")).body as {
      paths: Record<string, Record<string, unknown>>;
    };
    const contract = new Set(Object.values(routes).map((r: Route) => `${r.method} ${r.path}`));
    const documented = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    expect(documented.length).toBeGreaterThan(25);
    expect(documented.filter((op) => !contract.has(op))).toEqual([]);
  });
});

import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { routes } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TestClient } from "./support/client.ts";
import { startControlPlane, type TestControlPlane } from "./support/control-plane.ts";

/**
 * /openapi.json as a real control plane serves it: complete (summary, operationId,
 * security, every refusal in the one error shape, servers), true (the security it declares
 * is what the API enforces) and clean under a standard linter's recommended rules. The
 * document does not depend on the database, so this runs on PGlite only.
 */
const ROOT = path.resolve(import.meta.dirname, "../../..");
const REDOCLY = path.join(ROOT, "node_modules/.bin/redocly");

/**
 * Warnings the recommended rules give that are facts, not omissions: the project has chosen
 * no license to declare, and the private-URL hand-off and the GitHub browser round trips
 * (sign-in, its callback, the app's setup URL) only ever redirect.
 */
const ACCEPTED_WARNINGS = [
  "info-license #/info",
  "operation-2xx-response #/paths/~1api~1v1~1access~1open/get/responses",
  "operation-2xx-response #/paths/~1api~1v1~1auth~1github/get/responses",
  "operation-2xx-response #/paths/~1api~1v1~1auth~1github~1callback/get/responses",
  "operation-2xx-response #/paths/~1api~1v1~1github~1setup/get/responses",
];

interface Operation {
  operationId?: string;
  summary?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  responses: Record<
    string,
    { content?: Record<string, { schema?: { properties?: Record<string, unknown> } }> }
  >;
}
interface Doc {
  servers: { url: string }[];
  components: { securitySchemes: Record<string, Record<string, string>> };
  paths: Record<string, Record<string, Operation>>;
}

describe("OpenAPI description", () => {
  let cp: TestControlPlane;
  let doc: Doc;
  let ops: { method: string; path: string; op: Operation }[];
  beforeAll(async () => {
    cp = await startControlPlane();
    doc = (await new TestClient(cp.url).get("/openapi.json")).body as Doc;
    ops = Object.entries(doc.paths).flatMap(([p, byMethod]) =>
      Object.entries(byMethod).map(([method, op]) => ({ method, path: p, op })),
    );
  });
  afterAll(async () => {
    await cp?.close();
  });

  it("lists this control plane as its server and declares the three ways in", () => {
    expect(doc.servers).toEqual([{ url: new URL(cp.url).origin, description: "this control plane" }]);
    const schemes = doc.components.securitySchemes;
    expect(schemes.session).toMatchObject({ type: "apiKey", in: "cookie", name: "doppio_session" });
    expect(schemes.apiToken).toMatchObject({ type: "http", scheme: "bearer", bearerFormat: "dpb_…" });
    expect(schemes.agentToken).toMatchObject({ type: "http", scheme: "bearer", bearerFormat: "dpa_…" });
  });

  it("gives every route of the contract a summary, its name as operationId, security and refusals", () => {
    expect(ops.map((o) => o.op.operationId).sort()).toEqual(Object.keys(routes).sort());
    for (const { method, path: p, op } of ops) {
      const what = `${method} ${p}`;
      expect(op.summary, what).toBeTruthy();
      expect(op.tags, what).toHaveLength(1);
      expect(Array.isArray(op.security), what).toBe(true);
      const refusals = Object.keys(op.responses).filter((s) => Number(s) >= 400);
      expect(refusals, what).toContain("500");
      for (const status of refusals) {
        const schema = op.responses[status]!.content?.["application/json"]?.schema;
        expect(Object.keys(schema?.properties ?? {}), `${what} ${status}`).toEqual(["error"]);
      }
    }
    const security = (name: string) => ops.find((o) => o.op.operationId === name)!.op.security;
    expect(security("signup")).toEqual([]);
    expect(security("listBoxes")).toEqual([{ session: [] }, { apiToken: [] }]);
    expect(security("heartbeat")).toEqual([{ agentToken: [] }]);
  });

  it("declares the security the API enforces: no credential, or the wrong kind, is a 401", async () => {
    const admin = await cp.admin();
    const apiToken = (await admin.post("/api/v1/tokens", { name: "openapi" })).body.token as string;
    const url = (p: string) =>
      p.replace(/\{(\w+)\}/g, (_, name: string) =>
        name === "id" ? "00000000-0000-4000-8000-000000000000" : "x",
      );
    const body = (method: string) => (method === "get" ? undefined : {});
    const checked: string[] = [];
    for (const { method, path: p, op } of ops) {
      const security = op.security ?? [];
      if (security.length === 0 || security.some((s) => Object.keys(s).length === 0)) continue;
      const anonymous = await new TestClient(cp.url).request(method.toUpperCase(), url(p), body(method));
      expect(anonymous.status, `${method} ${p} anonymous`).toBe(401);
      if (security.every((s) => "agentToken" in s)) {
        const user = await new TestClient(cp.url, apiToken).request(
          method.toUpperCase(),
          url(p),
          body(method),
        );
        expect(user.status, `${method} ${p} with an API token`).toBe(401);
      }
      checked.push(op.operationId!);
    }
    expect(checked.length).toBeGreaterThan(25);
  });

  it("passes Redocly's recommended rules with no errors", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "doppio-openapi-"));
    try {
      const file = path.join(dir, "openapi.json");
      await writeFile(file, JSON.stringify(doc));
      // Telemetry and the update check would reach out to the network; both are off.
      const env = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" };
      const { stdout } = await promisify(execFile)(
        REDOCLY,
        ["lint", "--extends=recommended", "--format=json", file],
        { env, cwd: dir },
      ).catch((err: { stdout?: string; stderr?: string }) => {
        // Exit 1 on errors: the report on stdout says which.
        if (!err.stdout) throw err;
        return { stdout: err.stdout };
      });
      const report = JSON.parse(stdout) as {
        totals: { errors: number; warnings: number };
        problems: { ruleId: string; severity: string; message: string; location: { pointer: string }[] }[];
      };
      const problems = report.problems.map((p) => `${p.ruleId} ${p.location[0]?.pointer ?? ""}`);
      expect(
        report.problems.filter((p) => p.severity === "error").map((p) => `${p.ruleId}: ${p.message}`),
      ).toEqual([]);
      expect(problems.filter((p) => !ACCEPTED_WARNINGS.includes(p))).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

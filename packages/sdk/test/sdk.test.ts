import type { LogLine } from "@doppio/contracts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startControlPlane, type TestControlPlane } from "../../../apps/api/test/support/control-plane.ts";
import { type ScriptedAgent, startScriptedAgent } from "../../../apps/cli/test/support/scripted-agent.ts";
import {
  ApiError,
  BoxFailedError,
  DoppioClient,
  followLogs,
  NetworkError,
  UnexpectedAnswerError,
  waitForBox,
} from "../src/index.ts";

/**
 * The SDK against a real control plane, with a scripted agent playing the host's side of
 * the real agent protocol: the README's script (create, wait for running, read the URLs,
 * follow the log), then how each kind of failure reaches the caller.
 */
describe("SDK", () => {
  let cp: TestControlPlane;
  let agent: ScriptedAgent;
  let client: DoppioClient;

  beforeAll(async () => {
    cp = await startControlPlane();
    const admin = await cp.admin();
    agent = await startScriptedAgent(admin, "sdk-host", {
      failWith: (job) =>
        String(job.payload.slug).startsWith("doomed") ? { code: "disk_failed", error: "disk full" } : null,
    });
    const token = (await admin.post("/api/v1/tokens", { name: "sdk" })).body.token as string;
    client = new DoppioClient({ baseUrl: cp.url, token });
  });
  afterAll(async () => {
    await agent?.stop();
    await cp?.close();
  });

  it("creates a box, waits until it runs, reads its URLs and follows its log", async () => {
    const { box, job } = await client.createBox({ template: "minimal", name: "sdk-box" });
    expect([box.status, job.action]).toEqual(["creating", "create"]);

    const running = await waitForBox(client, box.slug, { signal: AbortSignal.timeout(20_000) });
    expect(running.status).toBe("running");
    expect(running.urls?.site).toContain("sdk-box");
    expect(running.urls?.code).toContain("sdk-box");

    const abort = new AbortController();
    const seen: LogLine[] = [];
    const following = (async () => {
      for await (const lines of followLogs(client, box.slug, { after: 0, signal: abort.signal })) {
        seen.push(...lines);
        if (seen.length >= 3) abort.abort();
      }
    })();
    await agent.pushLogs(box.slug, [{ source: "console", text: "booted" }]);
    await agent.pushLogs(box.slug, [
      { source: "bench", text: "serving on :8000" },
      { source: "bench", text: "GET / 200" },
    ]);
    await following;
    expect(seen.map((l) => `${l.source}: ${l.text}`)).toEqual([
      "console: booted",
      "bench: serving on :8000",
      "bench: GET / 200",
    ]);
    expect((await client.logs(box.slug, { after: seen[0]!.seq })).lines).toHaveLength(2);
  });

  it("says why a box never ran", async () => {
    const { box } = await client.createBox({ template: "minimal", name: "doomed-box" });
    const err = await waitForBox(client, box.slug).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BoxFailedError);
    expect((err as BoxFailedError).message).toMatch(/doomed-box is error: .*disk full/);
  });

  it("throws the API's refusal with its code, status and message", async () => {
    const err = await client.box("no-such-box").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 404, code: "not_found" });
    const bad = await client.createBox({ template: "" }).catch((e: unknown) => e);
    expect(bad).toMatchObject({ status: 400, code: "validation_failed" });
    const anonymous = await new DoppioClient({ baseUrl: cp.url }).boxes().catch((e: unknown) => e);
    expect(anonymous).toMatchObject({ status: 401, code: "unauthorized" });
  });

  it("tells no answer from an answer that is not the API's", async () => {
    const down = new DoppioClient({ baseUrl: "http://127.0.0.1:9", timeoutMs: 2000 });
    expect(await down.me().catch((e: unknown) => e)).toBeInstanceOf(NetworkError);
    // Something else on the URL: a 200 whose body is no box.
    const impostor = new DoppioClient({
      baseUrl: cp.url,
      fetch: async () => new Response(JSON.stringify({ hello: "world" }), { status: 200 }),
    });
    const err = await impostor.box("sdk-box").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnexpectedAnswerError);
    expect(err).toMatchObject({ method: "GET", path: "/api/v1/boxes/sdk-box", status: 200 });
  });
});

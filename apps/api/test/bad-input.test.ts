import { expect, it } from "vitest";
import { heartbeat, registerServer, signedInClient, TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const NASTY_SLUGS = [
  "a;rm -rf /",
  "../x",
  "..%2F..%2Fetc",
  "x".repeat(300),
  "bôx-ünïcode",
  "UPPER",
  "%00",
  "a b",
];

function expectErrorShape(res: { status: number; body: any }, status: number) {
  expect(res.status).toBe(status);
  expect(Object.keys(res.body)).toEqual(["error"]);
  expect(typeof res.body.error.code).toBe("string");
  expect(typeof res.body.error.message).toBe("string");
  expect(JSON.stringify(res.body)).not.toMatch(/at .*\.ts:\d+|stack|Drizzle|SELECT|postgres/i);
}

describeOnEachDb("bad input", (env) => {
  let user: TestClient;

  it("answers malformed JSON, wrong types, unknown fields and oversized bodies with a 4xx", async () => {
    user = await signedInClient(env().url, "bad");
    const agent = await registerServer(await env().admin(), "bad-host");
    await agent.post("/agent/v1/heartbeat", heartbeat());

    expectErrorShape(await user.request("POST", "/api/v1/boxes", undefined, { rawBody: "{not json" }), 400);
    expectErrorShape(await user.request("POST", "/api/v1/boxes", undefined, { rawBody: "" }), 400);
    expectErrorShape(await user.request("POST", "/api/v1/boxes", undefined, { rawBody: "[]" }), 400);
    expectErrorShape(await user.post("/api/v1/boxes", { template: 42 }), 400);
    expectErrorShape(await user.post("/api/v1/boxes", { template: "minimal", size: "huge" }), 400);
    expectErrorShape(await user.post("/api/v1/boxes", { template: "minimal", isAdmin: true }), 400);
    expectErrorShape(
      await user.post("/api/v1/boxes", { template: "minimal", env: { "BAD NAME": "x" } }),
      400,
    );
    expectErrorShape(await user.post("/api/v1/boxes", { template: "minimal", env: { OK: 1 } }), 400);
    const xml = { rawBody: "<x/>", headers: { "content-type": "application/xml" } };
    // With the session cookie, anything but JSON is refused before parsing (CSRF check).
    expectErrorShape(await user.request("POST", "/api/v1/boxes", undefined, xml), 403);
    const token = (await user.post("/api/v1/tokens", { name: "bad-input" })).body.token;
    expectErrorShape(await user.withBearer(token).request("POST", "/api/v1/boxes", undefined, xml), 415);
    const huge = JSON.stringify({ template: "minimal", env: { BIG: "x".repeat(200_000) } });
    expectErrorShape(await user.request("POST", "/api/v1/boxes", undefined, { rawBody: huge }), 413);
    expectErrorShape(
      await user.post("/api/v1/auth/signup", { email: "not-an-email", password: "long enough pw" }),
      400,
    );
    expectErrorShape(await agent.post("/agent/v1/jobs/claim", { waitMs: "soon" }), 400);
    expectErrorShape(await agent.post("/agent/v1/jobs/not-a-uuid/events", { events: [] }), 400);
    expectErrorShape(
      await agent.post("/agent/v1/jobs/00000000-0000-4000-8000-000000000000/events", {
        events: [{ seq: 1, at: new Date().toISOString(), type: "teleport" }],
      }),
      400,
    );
  });

  it("rejects bad box names on create and treats them as missing elsewhere", async () => {
    for (const slug of NASTY_SLUGS) {
      expectErrorShape(await user.post("/api/v1/boxes", { template: "minimal", name: slug }), 400);
      const path = `/api/v1/boxes/${encodeURIComponent(slug)}`;
      expectErrorShape(await user.get(path), 404);
      expectErrorShape(await user.post(`${path}/stop`), 404);
      expectErrorShape(await user.del(path), 404);
    }
    expect((await user.get("/api/v1/boxes")).body.boxes).toEqual([]);
  });

  it("names an unknown template clearly", async () => {
    const res = await user.post("/api/v1/boxes", { template: "no-such-template" });
    expectErrorShape(res, 400);
    expect(res.body.error.message).toBe('unknown template "no-such-template"');
  });

  it("asks for authentication everywhere it is needed", async () => {
    const anon = new TestClient(env().url);
    for (const [method, path] of [
      ["GET", "/api/v1/me"],
      ["GET", "/api/v1/boxes"],
      ["POST", "/api/v1/boxes"],
      ["GET", "/api/v1/boxes/x-box"],
      ["POST", "/api/v1/boxes/x-box/start"],
      ["DELETE", "/api/v1/boxes/x-box"],
      ["GET", "/api/v1/tokens"],
      ["GET", "/api/v1/templates"],
      ["GET", "/api/v1/events"],
      ["GET", "/api/v1/servers"],
      ["POST", "/agent/v1/heartbeat"],
    ] as const) {
      const res = await anon.request(method, path, method === "POST" ? {} : undefined);
      expect([400, 401]).toContain(res.status);
      if (path !== "/api/v1/boxes" || method !== "POST") expectErrorShape(res, 401);
    }
    expectErrorShape(await anon.withBearer("dpb_forged").get("/api/v1/me"), 401);
    expectErrorShape(await anon.get("/no/such/route"), 404);
  });
});

describeOnEachDb("operations endpoints", (env) => {
  it("serves health, Prometheus metrics and the OpenAPI document", async () => {
    const anon = new TestClient(env().url);
    const health = await anon.get("/healthz");
    expect(health.body).toEqual({ ok: true, database: env().kind });
    const metrics = await anon.get("/metrics");
    expect(metrics.headers.get("content-type")).toMatch(/text\/plain/);
    expect(metrics.body).toContain("doppio_http_request_duration_seconds");
    expect(metrics.body).toContain("doppio_claim_waiters");
    const openapi = await anon.get("/openapi.json");
    expect(openapi.body.openapi).toMatch(/^3\./);
    for (const path of [
      "/api/v1/boxes",
      "/api/v1/boxes/{slug}/start",
      "/agent/v1/jobs/claim",
      "/api/v1/servers/{name}/token",
    ]) {
      expect(Object.keys(openapi.body.paths)).toContain(path);
    }
    expect(
      openapi.body.paths["/api/v1/boxes"].post.requestBody.content["application/json"].schema.required,
    ).toEqual(["template"]);
  });

  it("streams the team's box and job changes as server-sent events", async () => {
    const user = await signedInClient(env().url, "sse");
    const agent = await registerServer(await env().admin(), "sse-host");
    await agent.post("/agent/v1/heartbeat", heartbeat());
    const token = (await user.post("/api/v1/tokens", { name: "sse" })).body.token;
    const abort = new AbortController();
    const res = await fetch(new URL("/api/v1/events", env().url), {
      headers: { authorization: `Bearer ${token}` },
      signal: abort.signal,
    });
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    const reader = res.body!.getReader();
    const seen: string[] = [];
    const reading = (async () => {
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += new TextDecoder().decode(value);
        for (const m of buffer.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)) {
          const data = JSON.parse(m[2]!);
          seen.push(`${m[1]}:${data.slug ?? data.action}:${data.status}`);
        }
        buffer = buffer.slice(buffer.lastIndexOf("\n\n") + 2);
        if (seen.includes("job:create:succeeded")) return;
      }
    })();
    await user.post("/api/v1/boxes", { template: "minimal", name: "streamed" });
    const [job] = (await agent.post("/agent/v1/jobs/claim", { waitMs: 0 })).body.jobs;
    await agent.post(`/agent/v1/jobs/${job.id}/events`, {
      events: [{ seq: 1, at: new Date().toISOString(), type: "result", ok: true, data: { ip: "10.0.0.2" } }],
    });
    await reading;
    abort.abort();
    expect(seen).toEqual(["box:streamed:creating", "box:streamed:running", "job:create:succeeded"]);
  });
});

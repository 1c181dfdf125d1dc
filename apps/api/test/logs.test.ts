import { LOG_BATCH_MAX } from "@doppio/contracts";
import { expect, it } from "vitest";
import { LOG_KEEP_LINES } from "../src/services/logs.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

const at = () => new Date().toISOString();
const line = (offset: number, text: string, source = "console") => ({ offset, at: at(), source, text });

/** Reads `lines` events from a log stream until `want` lines arrived; returns them and the last event id. */
async function follow(res: Response, want: number): Promise<{ texts: string[]; lastId: number }> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const texts: string[] = [];
  let lastId = 0;
  let buf = "";
  while (texts.length < want) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let end = buf.indexOf("\n\n");
    while (end >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      end = buf.indexOf("\n\n");
      const id = /^id: (\d+)$/m.exec(frame);
      const data = /^data: (.*)$/m.exec(frame);
      if (!/^event: lines$/m.test(frame) || !data) continue;
      lastId = Number(id?.[1]);
      for (const l of JSON.parse(data[1]!).lines) texts.push(l.text);
    }
  }
  await reader.cancel();
  return { texts, lastId };
}

describeOnEachDb("box logs", (env) => {
  let owner: TestClient;
  let stranger: TestClient;
  let agent: TestClient;
  let otherAgent: TestClient;

  async function newBox(name: string): Promise<string> {
    if (!agent) {
      const admin = await env().admin();
      owner = await signedInClient(env().url, "logs-owner");
      stranger = await signedInClient(env().url, "logs-stranger");
      otherAgent = await registerServer(admin, `logs-b-${env().kind}`, { status: "pending" });
      const a = await registerServer(admin, `logs-a-${env().kind}`);
      await a.post("/agent/v1/heartbeat", heartbeat());
      agent = a;
    }
    const res = await owner.post("/api/v1/boxes", { template: "minimal", name });
    expect(res.status).toBe(202);
    return res.body.box.slug;
  }

  it("stores each byte range of a serial log once, whatever the agent resends", async () => {
    const slug = await newBox("logs-once");
    const first = { epoch: 1000, end: 20, lines: [line(0, "boot"), line(5, "hello", "bench")] };
    expect((await agent.post(`/agent/v1/boxes/${slug}/logs`, first)).body).toEqual({
      epoch: 1000,
      offset: 20,
      stored: 2,
    });
    // The agent crashed before saving the ack and resends from 0 with one more line.
    const resend = { epoch: 1000, end: 30, lines: [...first.lines, line(20, "third")] };
    expect((await agent.post(`/agent/v1/boxes/${slug}/logs`, resend)).body).toMatchObject({
      offset: 30,
      stored: 1,
    });
    // A file from before (lower epoch) adds nothing; a new file (higher epoch) starts over.
    const stale = { epoch: 999, end: 10, lines: [line(0, "old")] };
    expect((await agent.post(`/agent/v1/boxes/${slug}/logs`, stale)).body).toEqual({
      epoch: 1000,
      offset: 30,
      stored: 0,
    });
    const fresh = { epoch: 2000, end: 6, lines: [line(0, "again")] };
    expect((await agent.post(`/agent/v1/boxes/${slug}/logs`, fresh)).body).toMatchObject({
      epoch: 2000,
      stored: 1,
    });

    const page = await owner.get(`/api/v1/boxes/${slug}/logs`);
    expect(page.status).toBe(200);
    expect(page.body.lines.map((l: { text: string }) => l.text)).toEqual(["boot", "hello", "third", "again"]);
    expect(page.body.lines[1]).toMatchObject({ source: "bench" });
    const seqs = page.body.lines.map((l: { seq: number }) => l.seq);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
    expect(page.body.next).toBe(seqs.at(-1));
    // Paging and filters.
    const after = await owner.get(`/api/v1/boxes/${slug}/logs?after=${seqs[1]}`);
    expect(after.body.lines.map((l: { text: string }) => l.text)).toEqual(["third", "again"]);
    const tail = await owner.get(`/api/v1/boxes/${slug}/logs?tail=1`);
    expect(tail.body.lines.map((l: { text: string }) => l.text)).toEqual(["again"]);
    const bench = await owner.get(`/api/v1/boxes/${slug}/logs?source=bench`);
    expect(bench.body.lines.map((l: { text: string }) => l.text)).toEqual(["hello"]);
  });

  it("keeps the newest lines of a box and drops the oldest", async () => {
    const slug = await newBox("logs-trim");
    // Lines of 8 bytes each; six full batches = LOG_KEEP_LINES + 1000 lines.
    let n = 0;
    while (n < LOG_KEEP_LINES + 1000) {
      const lines = Array.from({ length: LOG_BATCH_MAX }, (_, i) => line((n + i) * 8, `l${n + i}`));
      n += LOG_BATCH_MAX;
      const res = await agent.post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: n * 8, lines });
      expect(res.status).toBe(200);
    }
    const page = await owner.get(`/api/v1/boxes/${slug}/logs?tail=5000`);
    expect(page.body.lines).toHaveLength(LOG_KEEP_LINES);
    expect(page.body.lines.at(-1).text).toBe(`l${n - 1}`);
    const first = await owner.get(`/api/v1/boxes/${slug}/logs?after=0&tail=1`);
    expect(first.body.lines[0].text).toBe(`l${n - LOG_KEEP_LINES}`);
  });

  it("streams the backlog, then live lines, and resumes after Last-Event-ID", async () => {
    const slug = await newBox("logs-live");
    await agent.post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: 4, lines: [line(0, "one")] });
    const stream = await owner.open(`/api/v1/boxes/${slug}/logs/stream`);
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reading = follow(stream, 3);
    await new Promise((r) => setTimeout(r, 100));
    await agent.post(`/agent/v1/boxes/${slug}/logs`, {
      epoch: 1,
      end: 12,
      lines: [line(4, "two"), line(8, "three")],
    });
    const seen = await reading;
    expect(seen.texts).toEqual(["one", "two", "three"]);

    await agent.post(`/agent/v1/boxes/${slug}/logs`, { epoch: 1, end: 16, lines: [line(12, "four")] });
    const again = await owner.open(`/api/v1/boxes/${slug}/logs/stream`, {
      "last-event-id": String(seen.lastId),
    });
    expect((await follow(again, 1)).texts).toEqual(["four"]);
  });

  it("shows a box's log to its team only and takes lines only from the box's own server", async () => {
    const slug = await newBox("logs-private");
    expect((await stranger.get(`/api/v1/boxes/${slug}/logs`)).status).toBe(404);
    expect((await stranger.open(`/api/v1/boxes/${slug}/logs/stream`)).status).toBe(404);
    expect(
      (await new (owner.constructor as typeof TestClient)(env().url).get(`/api/v1/boxes/${slug}/logs`))
        .status,
    ).toBe(401);
    const batch = { epoch: 1, end: 4, lines: [line(0, "x")] };
    expect((await otherAgent.post(`/agent/v1/boxes/${slug}/logs`, batch)).status).toBe(404);
    expect((await agent.post("/agent/v1/boxes/no-such-box/logs", batch)).status).toBe(404);
    expect((await owner.get(`/api/v1/boxes/${slug}/logs`)).body.lines).toEqual([]);
  });

  it("rejects malformed batches and queries with one error shape", async () => {
    const slug = await newBox("logs-bad");
    const bad = [
      { epoch: 1, end: 4, lines: [{ offset: 0, at: at(), source: "Bad Source!", text: "x" }] },
      { epoch: -1, end: 4, lines: [] },
      { epoch: 1, end: 4, lines: [line(0, "x".repeat(5000))] },
      { epoch: 1, end: 4, lines: [], extra: true },
    ];
    for (const body of bad) {
      const res = await agent.post(`/agent/v1/boxes/${slug}/logs`, body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: { code: "validation_failed" } });
    }
    expect((await owner.get(`/api/v1/boxes/${slug}/logs?tail=abc`)).status).toBe(400);
    expect((await owner.get(`/api/v1/boxes/${slug}/logs?tail=99999`)).status).toBe(400);
  });
});

import { routes } from "@doppio/contracts";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError, call } from "../src/api/client.ts";
import { parseEvent } from "../src/api/events.ts";

/** The dashboard's client against a stand-in fetch: what it sends, and what it lets through. */
function answer(status: number, body: unknown) {
  const sent: { url: string; init: RequestInit }[] = [];
  vi.stubGlobal("fetch", async (url: string, init: RequestInit) => {
    sent.push({ url, init });
    return new Response(body === undefined ? null : JSON.stringify(body), { status });
  });
  return sent;
}

const box = {
  slug: "brisk-falcon",
  template: "minimal",
  size: "small",
  desiredState: "running",
  status: "running",
  statusReason: null,
  errorCode: null,
  server: "fc-1",
  ip: "10.0.0.2",
  urls: null,
  env: {},
  allowedActions: ["stop"],
  memoryFileBytes: null,
  idleTimeoutMinutes: 30,
  idleTimeoutCustom: false,
  idleHibernatesAt: "2026-01-01T00:30:00.000Z",
  publicWake: false,
  createdAt: "2026-01-01T00:00:00.000Z",
  updatedAt: "2026-01-01T00:00:00.000Z",
};

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("dashboard API client", () => {
  it("parses an answer with the route's schema, dropping fields the contract does not know", async () => {
    const sent = answer(200, { ...box, extra: "ignored" });
    const got = await call("getBox", { params: { slug: "brisk-falcon" } });
    expect(sent[0]!.url).toBe("/api/v1/boxes/brisk-falcon");
    expect(sent[0]!.init.body).toBeUndefined();
    expect(got.slug).toBe("brisk-falcon");
    expect(got).not.toHaveProperty("extra");
  });

  it("refuses an answer that does not fit the contract instead of handing it to a page", async () => {
    answer(200, { ...box, status: undefined });
    const err = await call("getBox", { params: { slug: "brisk-falcon" } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).code).toBe("bad_answer");
  });

  it("sends `{}` as JSON on a bodyless change, as the CSRF check wants of cookie callers", async () => {
    const sent = answer(204, undefined);
    await call("logout", {});
    expect(sent[0]!.init.method).toBe("POST");
    expect(sent[0]!.init.body).toBe("{}");
    expect(sent[0]!.init.headers).toMatchObject({ "content-type": "application/json" });
    expect(sent[0]!.init.credentials).toBe("same-origin");
  });

  it("turns the one error shape into an ApiError with the field messages", async () => {
    answer(400, {
      error: {
        code: "validation_failed",
        message: "invalid request body",
        details: { issues: [{ message: "too short" }] },
      },
    });
    const err = await call("createBox", { body: { template: "" } }).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 400, code: "validation_failed", message: "Too short" });
  });

  it("drops a streamed event whose data does not fit its schema", () => {
    const event = (data: string) => new MessageEvent("job", { data });
    expect(parseEvent(routes.streamEvents.events.box, event(JSON.stringify(box)))?.slug).toBe("brisk-falcon");
    expect(parseEvent(routes.streamEvents.events.box, event(JSON.stringify({ slug: 1 })))).toBeNull();
    expect(parseEvent(routes.streamEvents.events.box, event("not json"))).toBeNull();
  });
});

import pino from "pino";
import { describe, expect, it } from "vitest";
import { Waker } from "../../src/edge/wake.ts";

describe("Waker (rate limits between the edge and the control plane)", () => {
  const make = () => {
    const asked: string[] = [];
    const clock = { now: 0 };
    const waker = new Waker({
      ask: async (slug) => {
        asked.push(slug);
      },
      now: () => clock.now,
      log: pino({ level: "silent" }),
      perBoxMs: 10_000,
      windowMs: 10_000,
      maxPerWindow: 3,
    });
    return { asked, clock, waker };
  };

  it("asks once per box per interval however many requests arrive", () => {
    const { asked, clock, waker } = make();
    expect(waker.wake("a")).toBe(true);
    for (let i = 0; i < 50; i++) expect(waker.wake("a")).toBe(false);
    clock.now += 9_999;
    expect(waker.wake("a")).toBe(false);
    clock.now += 1;
    expect(waker.wake("a")).toBe(true);
    expect(asked).toEqual(["a", "a"]);
  });

  it("caps asks for all boxes per window, so a flood over many hosts names stays bounded", () => {
    const { asked, clock, waker } = make();
    const results = ["a", "b", "c", "d", "e"].map((s) => waker.wake(s));
    expect(results).toEqual([true, true, true, false, false]);
    clock.now += 10_000;
    expect(waker.wake("d")).toBe(true);
    expect(asked).toEqual(["a", "b", "c", "d"]);
  });

  it("a failing control plane never throws into the request", async () => {
    const waker = new Waker({
      ask: async () => {
        throw new Error("control plane down");
      },
      now: () => 0,
      log: pino({ level: "silent" }),
    });
    expect(waker.wake("a")).toBe(true);
    await new Promise((r) => setTimeout(r, 10));
  });
});

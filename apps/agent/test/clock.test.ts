import { describe, expect, test } from "vitest";
import { backoffMs, jittered } from "../src/clock.ts";

describe("waits between calls to the control plane", () => {
  test("backoff doubles from 200 ms up to its cap, each wait drawn from the upper half", () => {
    const top = () => 1;
    const bottom = () => 0;
    expect([1, 2, 3, 4, 5, 6, 30].map((f) => backoffMs(f, 5_000, 200, top))).toEqual([
      200, 400, 800, 1600, 3200, 5000, 5000,
    ]);
    expect([1, 2, 6].map((f) => backoffMs(f, 5_000, 200, bottom))).toEqual([100, 200, 2500]);
    expect(backoffMs(0)).toBe(0);
  });

  test("an interval strays by at most the fraction either way", () => {
    expect(jittered(10_000, 0.1, () => 0)).toBe(9_000);
    expect(jittered(10_000, 0.1, () => 0.5)).toBe(10_000);
    expect(jittered(10_000, 0.1, () => 1)).toBe(11_000);
  });

  test("hosts that failed together do not come back together", () => {
    // 100 hosts lose the control plane in the same instant and retry six times each.
    const hosts = Array.from({ length: 100 }, () => {
      let at = 0;
      for (let failures = 1; failures <= 6; failures++) at += backoffMs(failures);
      return at;
    });
    // The six steps' ceilings: 200, 400, 800, 1600, 3200 and the 5000 cap (11 200 ms in all);
    // each wait is drawn from the upper half of its step. Without the draw every host would
    // be back at the same millisecond.
    expect(Math.max(...hosts) - Math.min(...hosts)).toBeGreaterThan(1_000);
    for (const at of hosts) expect(at).toBeGreaterThanOrEqual(5_600);
    for (const at of hosts) expect(at).toBeLessThanOrEqual(11_200);
    // And hosts whose beats line up drift apart over a few intervals.
    const beats = Array.from({ length: 100 }, () => {
      let at = 0;
      for (let n = 0; n < 5; n++) at += jittered(10_000, 0.1);
      return at;
    });
    expect(Math.max(...beats) - Math.min(...beats)).toBeGreaterThan(1_000);
  });
});

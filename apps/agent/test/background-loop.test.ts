import { describe, expect, test, vi } from "vitest";
import { Wakeup } from "../src/clock.ts";
import { AgentError } from "../src/errors.ts";
import { BackgroundLoop } from "../src/loops/background-loop.ts";

/** A loop whose pass succeeds or fails as told, recording nothing but its passes. */
class Probe extends BackgroundLoop {
  passes = 0;
  constructor(private readonly fail: boolean | Error) {
    super();
  }
  protected run(signal: AbortSignal): Promise<void> {
    return this.repeat(signal, {
      intervalMs: 10_000,
      retryMs: () => 700,
      pass: async () => {
        this.passes++;
        if (this.fail) throw this.fail === true ? new Error("control plane away") : this.fail;
      },
      failed: () => {},
    });
  }
}

/** The first wait a loop asks for, with Math.random drawing `draw`. */
async function firstWait(draw: number, fail: boolean | Error = false): Promise<number> {
  vi.spyOn(Math, "random").mockReturnValue(draw);
  const wait = vi.spyOn(Wakeup.prototype, "wait");
  const loop = new Probe(fail);
  loop.start();
  try {
    await vi.waitFor(() => expect(wait).toHaveBeenCalled());
    await loop.stop();
    expect(loop.passes).toBe(1);
    return wait.mock.calls[0]![0];
  } finally {
    vi.restoreAllMocks();
  }
}

describe("the agent's background loops", () => {
  test("wait their interval give or take a tenth, so hosts started together drift apart", async () => {
    expect(await firstWait(0)).toBe(9_000);
    expect(await firstWait(0.5)).toBe(10_000);
    expect(await firstWait(1)).toBe(11_000);
  });

  test("after a failed pass wait the retry delay instead", async () => {
    expect(await firstWait(0.5, true)).toBe(700);
  });

  test("after a refusal wait what its Retry-After asked when that is longer", async () => {
    const refusal = (retryAfterMs: number) =>
      new AgentError("control_plane_rejected", "control plane answered 429", {
        details: { status: 429, retryAfterMs },
      });
    expect(await firstWait(0.5, refusal(3_000))).toBe(3_000);
    expect(await firstWait(0.5, refusal(100))).toBe(700);
  });
});

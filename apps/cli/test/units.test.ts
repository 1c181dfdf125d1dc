import type { Job } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { parseEnv, parseSize, parseSlug } from "../src/commands/box-args.ts";
import { contextNameFor, normalizeUrl, resolveTarget } from "../src/config.ts";
import { CliError } from "../src/errors.ts";
import { LogPrinter, sanitizeLogText } from "../src/logs.ts";
import { formatDuration, renderTable } from "../src/output.ts";
import { loadSettings } from "../src/settings.ts";
import { currentLabel } from "../src/wait.ts";
import { isNewer } from "../src/watch.ts";

const kindOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err instanceof CliError ? err.kind : "other";
  }
  return "none";
};

function job(patch: Partial<Job>): Job {
  return {
    id: "11111111-2222-3333-4444-555555555555",
    action: "create",
    box: "b-1",
    server: "s",
    status: "pending",
    attempts: 0,
    steps: [],
    error: null,
    errorCode: null,
    result: null,
    log: "",
    createdAt: "2026-01-01T00:00:00.000Z",
    startedAt: null,
    finishedAt: null,
    ...patch,
  };
}
const step = (name: Job["steps"][number]["name"], status: "running" | "succeeded" | "failed") => ({
  name,
  status,
  startedAt: "2026-01-01T00:00:01.000Z",
  finishedAt: status === "running" ? null : "2026-01-01T00:00:02.000Z",
});

describe("argument parsing", () => {
  it("parses --env pairs, keeping '=' in values", () => {
    expect(parseEnv(["A=1", "B=x=y", "EMPTY="])).toEqual({ A: "1", B: "x=y", EMPTY: "" });
  });

  it("rejects malformed --env as usage errors", () => {
    for (const bad of ["NOEQ", "=v", "1A=b", "A-B=c", "Ä=1"])
      expect(
        kindOf(() => parseEnv([bad])),
        bad,
      ).toBe("usage");
  });

  it("checks slugs and sizes with the shared contracts", () => {
    expect(parseSlug("my-box-1")).toBe("my-box-1");
    expect(kindOf(() => parseSlug("My_Box"))).toBe("usage");
    expect(parseSize("large")).toBe("large");
    expect(kindOf(() => parseSize("huge"))).toBe("usage");
  });
});

describe("config resolution", () => {
  const settings = (env: Record<string, string>) => loadSettings({ HOME: "/home/u", ...env });
  const config = {
    current: "prod",
    contexts: {
      prod: { url: "https://boxes.example.com", token: "dpb_prod" },
      dev: { url: "http://127.0.0.1:8080", token: "dpb_dev" },
    },
  };

  it("puts the config under XDG_CONFIG_HOME, else ~/.config", () => {
    expect(settings({}).configDir).toBe("/home/u/.config/doppio");
    expect(settings({ XDG_CONFIG_HOME: "/x" }).configDir).toBe("/x/doppio");
  });

  it("uses the current context, or the one picked by flag or DOPPIO_CONTEXT", () => {
    expect(resolveTarget(settings({}), config)).toMatchObject({
      url: "https://boxes.example.com",
      token: "dpb_prod",
    });
    expect(resolveTarget(settings({}), config, "dev").token).toBe("dpb_dev");
    expect(resolveTarget(settings({ DOPPIO_CONTEXT: "dev" }), config).token).toBe("dpb_dev");
    expect(kindOf(() => resolveTarget(settings({}), config, "nope"))).toBe("usage");
  });

  it("lets DOPPIO_URL and DOPPIO_TOKEN override, never sending a context's token elsewhere", () => {
    expect(resolveTarget(settings({ DOPPIO_TOKEN: "dpb_ci" }), config)).toMatchObject({
      url: "https://boxes.example.com",
      token: "dpb_ci",
    });
    expect(
      resolveTarget(settings({ DOPPIO_URL: "https://other.example.com" }), config).token,
    ).toBeUndefined();
    expect(
      resolveTarget(settings({ DOPPIO_URL: "https://other.example.com", DOPPIO_TOKEN: "dpb_ci" }), config),
    ).toMatchObject({ url: "https://other.example.com", token: "dpb_ci" });
    expect(kindOf(() => resolveTarget(settings({}), { current: null, contexts: {} }))).toBe("usage");
  });

  it("normalizes URLs and names contexts after the host", () => {
    expect(normalizeUrl("boxes.example.com/")).toBe("https://boxes.example.com");
    expect(normalizeUrl("http://127.0.0.1:8080/")).toBe("http://127.0.0.1:8080");
    expect(kindOf(() => normalizeUrl("ftp://x"))).toBe("usage");
    expect(contextNameFor("http://127.0.0.1:8080")).toBe("127.0.0.1:8080");
  });
});

describe("progress", () => {
  it("labels the running step, else the job's state", () => {
    expect(currentLabel(job({}))).toMatch(/^Queued/);
    expect(
      currentLabel(
        job({ status: "running", steps: [step("check_state", "succeeded"), step("boot_vm", "running")] }),
      ),
    ).toBe("Booting the VM");
    expect(currentLabel(job({ status: "failed", steps: [step("wait_ready", "failed")] }))).toBe(
      "Waiting for services failed",
    );
  });

  it("orders job updates that arrive out of order", () => {
    const a = job({ status: "running", steps: [step("check_state", "running")] });
    const b = job({ status: "running", steps: [step("check_state", "succeeded")] });
    const c = job({ status: "succeeded", steps: [step("check_state", "succeeded")] });
    expect(isNewer(a, b)).toBe(true);
    expect(isNewer(b, a)).toBe(false);
    expect(isNewer(b, c)).toBe(true);
    expect(isNewer(c, b)).toBe(false);
    expect(isNewer(job({ status: "delivered" }), job({}))).toBe(false);
  });
});

describe("output", () => {
  it("renders aligned tables without trailing spaces", () => {
    expect(
      renderTable(
        ["A", "BB"],
        [
          ["long", "x"],
          ["s", ""],
        ],
      ),
    ).toBe("A     BB\nlong  x\ns\n");
  });

  it("formats durations", () => {
    expect(formatDuration(999)).toBe("0s");
    expect(formatDuration(65_000)).toBe("1m05s");
    expect(formatDuration(3_720_000)).toBe("1h02m");
  });
});

describe("log lines", () => {
  const line = (seq: number, source: string, text: string) => ({
    seq,
    at: "2026-01-01T00:00:00.000Z",
    source,
    text,
  });

  it("keeps colours for a terminal and drops every other escape and control character", () => {
    const text = "\x1b[1;32mok\x1b[0m \x1b[2J\x1b]0;pwned\x07\x1b[Hdone\r\tend\x1b";
    expect(sanitizeLogText(text, true)).toBe("\x1b[1;32mok\x1b[0m done\tend");
    expect(sanitizeLogText(text, false)).toBe("ok done\tend");
  });

  it("prints source | text on a terminal, [source] text in pipes, and one JSON object per line", () => {
    const lines = [line(1, "console", "boot"), line(2, "code-server", "\x1b[31mfail")];
    expect(new LogPrinter("plain").render(lines)).toBe("[console] boot\n[code-server] fail\n");
    const tty = new LogPrinter("tty").render(lines).split("\n");
    expect(tty[0]).toBe("\x1b[2mconsole\x1b[0m | boot");
    // The colour a line starts is reset at its end, so it never bleeds into the next.
    expect(tty[1]?.startsWith("\x1b[3")).toBe(true);
    expect(tty[1]?.endsWith("mcode-server\x1b[0m | \x1b[31mfail\x1b[0m")).toBe(true);
    expect(
      new LogPrinter("json")
        .render(lines)
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l)),
    ).toEqual(lines);
  });
});

import type { Box, Job } from "@doppio/contracts";
import { QueryClient } from "@tanstack/react-query";
import { describe, expect, it } from "vitest";
import { putBox, putJob } from "../src/api/cache.ts";
import { keys } from "../src/api/keys.ts";
import { appendLines, EMPTY_LOG, formatLogLine, keepColoursOnly, sourceColour } from "../src/lib/box-log.ts";
import { jobLogLines } from "../src/lib/job-log.ts";
import { formatBytes } from "../src/lib/labels.ts";
import { formatAge, formatDuration, formatExpiry, minutesUntil } from "../src/lib/time.ts";

const box = (slug: string, status: Box["status"] = "running"): Box => ({
  slug,
  template: "minimal",
  size: "small",
  desiredState: "running",
  status,
  statusReason: null,
  errorCode: null,
  server: "fc-1",
  ip: null,
  urls: null,
  env: {},
  repo: null,
  allowedActions: [],
  memoryFileBytes: null,
  idleTimeoutMinutes: null,
  idleTimeoutCustom: false,
  idleHibernatesAt: null,
  publicWake: false,
  createdAt: "2026-01-01T00:00:00.000Z",
  updatedAt: "2026-01-01T00:00:00.000Z",
});

const job = (id: string, over: Partial<Job> = {}): Job => ({
  id,
  action: "create",
  box: "a-box",
  server: "fc-1",
  status: "running",
  attempts: 1,
  steps: [],
  error: null,
  errorCode: null,
  result: null,
  log: "",
  createdAt: "2026-01-01T00:00:00.000Z",
  startedAt: "2026-01-01T00:00:00.000Z",
  finishedAt: null,
  ...over,
});

describe("cache updates from live events", () => {
  it("replaces a known box, adds a new one first, and drops a deleted one from the list", () => {
    const qc = new QueryClient();
    qc.setQueryData(keys.boxes, [box("a-box"), box("b-box")]);
    putBox(qc, box("b-box", "stopping"));
    putBox(qc, box("c-box", "creating"));
    expect(qc.getQueryData<Box[]>(keys.boxes)!.map((b) => `${b.slug}:${b.status}`)).toEqual([
      "c-box:creating",
      "a-box:running",
      "b-box:stopping",
    ]);
    putBox(qc, box("a-box", "deleted"));
    expect(qc.getQueryData<Box[]>(keys.boxes)!.map((b) => b.slug)).toEqual(["c-box", "b-box"]);
    expect(qc.getQueryData<Box>(keys.box("a-box"))!.status).toBe("deleted");
  });

  it("keeps jobs newest first and leaves a not-yet-loaded history alone", () => {
    const qc = new QueryClient();
    putJob(qc, job("j1"));
    expect(qc.getQueryData(keys.jobs("a-box"))).toBeUndefined();
    qc.setQueryData(keys.jobs("a-box"), [job("j1")]);
    putJob(qc, job("j2", { action: "stop" }));
    putJob(qc, job("j1", { status: "succeeded" }));
    expect(qc.getQueryData<Job[]>(keys.jobs("a-box"))!.map((j) => `${j.id}:${j.status}`)).toEqual([
      "j2:running",
      "j1:succeeded",
    ]);
  });
});

describe("formatting", () => {
  it("formats durations and ages in plain words", () => {
    expect(formatDuration(400)).toBe("0.4 s");
    expect(formatDuration(12_400)).toBe("12 s");
    expect(formatDuration(185_000)).toBe("3 min 05 s");
    expect(formatDuration(-5)).toBe("0.0 s");
    const now = Date.parse("2026-01-01T00:10:00.000Z");
    expect(formatAge(null, now)).toBe("never");
    expect(formatAge("2026-01-01T00:09:58.000Z", now)).toBe("just now");
    expect(formatAge("2026-01-01T00:09:18.000Z", now)).toBe("42 s ago");
    expect(formatAge("2026-01-01T00:05:00.000Z", now)).toBe("5 min ago");
    expect(formatExpiry(null, now)).toBe("never expires");
    expect(formatExpiry("2026-01-01T05:10:00.000Z", now)).toBe("expires in 5 h");
    expect(formatExpiry("2026-01-31T00:10:00.000Z", now)).toBe("expires in 30 days");
    expect(formatExpiry("2026-01-01T00:05:00.000Z", now)).toBe("expired 5 min ago");
  });

  it("renders a job as terminal lines with human step names, durations and the error", () => {
    const lines = jobLogLines([
      job("j1", {
        status: "failed",
        error: "the golden snapshot is missing",
        log: "looking for golden minimal@1\n",
        steps: [
          {
            name: "check_state",
            status: "succeeded",
            startedAt: "2026-01-01T00:00:00.000Z",
            finishedAt: "2026-01-01T00:00:01.500Z",
          },
          {
            name: "restore_vm",
            status: "failed",
            startedAt: "2026-01-01T00:00:01.500Z",
            finishedAt: "2026-01-01T00:00:02.000Z",
            detail: "no snapshot file",
          },
        ],
      }),
    ]);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: strips the ANSI colours
    const plain = lines.map((l) => l.replace(/\x1b\[[0-9;]*m/g, "").replace(/^\d\d:\d\d:\d\d /, ""));
    expect(plain).toEqual([
      "== Create",
      "✓ Checking current state (1.5 s)",
      "✕ Restoring from the golden snapshot (0.5 s)",
      "         no snapshot file",
      "│ looking for golden minimal@1",
      "   failed: the golden snapshot is missing",
    ]);
  });
});

describe("box log buffer", () => {
  const line = (seq: number, source = "console", text = `line ${seq}`) => ({
    seq,
    at: "2026-01-01T00:00:00.000Z",
    source,
    text,
  });

  it("appends by seq (a replay adds nothing), keeps the newest lines, and lists console first", () => {
    let buf = appendLines(EMPTY_LOG, [line(1, "bench"), line(2), line(3, "code-server")], 4);
    expect(buf.sources).toEqual(["console", "bench", "code-server"]);
    expect(appendLines(buf, [line(2), line(3, "code-server")], 4)).toBe(buf);
    buf = appendLines(buf, [line(3), line(4), line(5), line(6)], 4);
    expect(buf.lines.map((l) => l.seq)).toEqual([3, 4, 5, 6]);
    // A source whose lines dropped off stays selectable.
    expect(buf.sources).toEqual(["console", "bench", "code-server"]);
  });

  it("keeps a line's colours but no other escape, and resets what it coloured", () => {
    expect(keepColoursOnly("\x1b[1;32mok\x1b[0m\x1b[2J\x1b]0;title\x07\x1b[H\rdone\tx")).toBe(
      "\x1b[1;32mok\x1b[0mdone\tx",
    );
    expect(formatLogLine(line(1, "bench", "\x1b[31mboom"), 7)).toBe(
      `${sourceColour("bench")}bench  \x1b[0m \x1b[2m│\x1b[0m \x1b[31mboom\x1b[0m`,
    );
    expect(sourceColour("bench")).not.toBe(sourceColour("console"));
    expect(formatLogLine(line(1, "console", "plain"), 0)).toBe("\x1b[2mconsole\x1b[0m \x1b[2m│\x1b[0m plain");
  });
});

describe("idle and hibernation labels", () => {
  it("minutes until hibernation round up and stop at 0", () => {
    const at = Date.UTC(2026, 0, 1, 12, 0, 0);
    const iso = new Date(at + 12 * 60_000).toISOString();
    expect(minutesUntil(iso, at)).toBe(12);
    expect(minutesUntil(iso, at + 60_000 + 1)).toBe(11);
    expect(minutesUntil(iso, at + 11 * 60_000 + 30_000)).toBe(1);
    expect(minutesUntil(iso, at + 13 * 60_000)).toBe(0);
  });

  it("saved memory sizes read as people read them", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(48 * 1024 * 1024)).toBe("48 MB");
    expect(formatBytes(1536 * 1024 * 1024)).toBe("1.5 GB");
  });
});

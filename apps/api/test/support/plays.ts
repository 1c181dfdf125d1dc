import { execFileSync } from "node:child_process";
import { expect } from "vitest";
import type { TestClient } from "./client.ts";

/** Why plays cannot run here, or null (CI installs Debian's ansible with scripts/bootstrap.sh). */
export function ansibleMissing(): string | null {
  try {
    execFileSync("sh", ["-c", "command -v ansible-playbook"], { stdio: "ignore" });
    return null;
  } catch {
    return "ansible-playbook is not installed (Debian package ansible; scripts/bootstrap.sh installs it)";
  }
}

/** Polls a play until it has ended (or `until` holds) and returns it with its tasks. */
export async function waitForPlay(
  admin: TestClient,
  id: string,
  until: (play: any) => boolean = (p) => !["pending", "running"].includes(p.status),
  timeoutMs = 120_000,
): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await admin.get(`/api/v1/plays/${id}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    if (until(res.body)) return res.body;
    if (Date.now() > deadline) throw new Error(`play ${id} did not get there: ${JSON.stringify(res.body)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Reads a play's SSE stream to its end: every event in order. */
export async function readPlayStream(admin: TestClient, id: string): Promise<{ event: string; data: any }[]> {
  const res = await admin.open(`/api/v1/plays/${id}/stream`);
  expect(res.status).toBe(200);
  const events: { event: string; data: any }[] = [];
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of res.body!) {
    buf += decoder.decode(chunk, { stream: true });
    let end = buf.indexOf("\n\n");
    while (end >= 0) {
      const frame = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const event = /^event: (.*)$/m.exec(frame)?.[1];
      const data = /^data: (.*)$/m.exec(frame)?.[1];
      if (event && data) events.push({ event, data: JSON.parse(data) });
      end = buf.indexOf("\n\n");
    }
  }
  return events;
}

/** Every process whose command line mentions `text` (e.g. a play's directory). */
export function processesMentioning(text: string): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return out
    .split("\n")
    .filter((l) => l.includes(text) && !l.includes("ps -eo"))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}

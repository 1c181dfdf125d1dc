import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { HostProcesses } from "../../src/vmm/firecracker/process.ts";

describe("HostProcesses (real child processes)", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "fc-proc-"));
  const procs = new HostProcesses();
  const started: number[] = [];
  afterAll(async () => {
    // Only while it is still ours: a recycled pid must never be signalled.
    for (const pid of started) if (await procs.isAlive(pid, "box-x")) await procs.kill(pid, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  const waitDead = async (pid: number, jailId: string) => {
    for (let i = 0; i < 100 && (await procs.isAlive(pid, jailId)); i++)
      await new Promise((r) => setTimeout(r, 20));
    return !(await procs.isAlive(pid, jailId));
  };

  it("spawns detached with output to the log, knows it by jail id, kills it", async () => {
    const log = path.join(dir, "serial.log");
    // sh -c SCRIPT NAME ARG: "--id" and the jail id land in the process's argv like the jailer's
    // (the trailing `true` keeps sh from exec-ing sleep, which would replace that argv).
    const { pid } = await procs.spawn({
      command: "/bin/sh",
      args: ["-c", "echo booted; sleep 30; true", "--id", "box-x"],
      logPath: log,
    });
    started.push(pid);
    for (let i = 0; i < 100 && readFileSync(log, "utf8") === ""; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(await procs.isAlive(pid, "box-x")).toBe(true);
    expect(await procs.isAlive(pid, "box-y")).toBe(false);
    await procs.kill(pid, "SIGKILL");
    expect(await waitDead(pid, "box-x")).toBe(true);
    expect(readFileSync(log, "utf8")).toBe("booted\n");
  });

  it("reports a missing binary as spawn_failed", async () => {
    await expect(
      procs.spawn({ command: path.join(dir, "no-jailer"), args: [], logPath: path.join(dir, "x.log") }),
    ).rejects.toMatchObject({ code: "spawn_failed" });
  });
});

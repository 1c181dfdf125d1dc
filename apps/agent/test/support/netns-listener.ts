import { type ChildProcess, spawn } from "node:child_process";
import type { Server } from "node:net";
import type { TestNetns } from "./netns.ts";

/**
 * A TCP listening socket bound inside a test-owned namespace (e.g. the bridge's gateway,
 * where guests reach the agent's metadata service), handed to this process: a Node child
 * started in the namespace opens it and sends the handle over its IPC channel. A server of
 * this process listening on it sees the guests' real source addresses. Stop the child by PID.
 */
export async function listenInNetns(
  ns: TestNetns,
  host: string,
  port: number,
): Promise<{ server: Server; child: ChildProcess }> {
  const script = `
    const net = require("node:net");
    const s = net.createServer();
    s.listen(${port}, ${JSON.stringify(host)}, () => process.send("listening", s, () => s.close()));
    process.on("disconnect", () => process.exit(0));
  `;
  const child = spawn("ip", ["netns", "exec", ns.name, process.execPath, "-e", script], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const server = await new Promise<Server>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listener on ${host}:${port} in ${ns.name}`)), 15_000);
    child.once("message", (_m, handle) => {
      clearTimeout(timer);
      resolve(handle as Server);
    });
    child.once("exit", (code) => reject(new Error(`listener child exited ${code}`)));
  });
  return { server, child };
}

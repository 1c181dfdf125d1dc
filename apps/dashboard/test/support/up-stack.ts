import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { stringify as toYaml } from "yaml";
import { freePort } from "../../../api/test/support/ports.ts";
import { hasChromium } from "./browser.ts";

/**
 * The real stack `make up` starts (scripts/local/stack.ts: control plane on PGlite, Caddy,
 * one agent with the QEMU backend that builds the minimal image and its golden snapshot),
 * in a fresh data directory on free loopback ports, for the browser tests that walk through
 * it end to end. One per test file: the stack is slow to start, so a file shares it between
 * its tests.
 */
export interface UpStack {
  data: string;
  settings: typeof import("../../../../scripts/local/settings.ts");
  stack: typeof import("../../../../scripts/local/stack.ts");
  adminPassword: string;
  close(): Promise<void>;
}

const isRoot = process.getuid?.() === 0;

/** What the stack needs that this machine lacks (the test skips and says so), or an empty list. */
export function upStackMissing(): string[] {
  return [
    !hasChromium && "/usr/bin/chromium (apt-get install chromium)",
    !isRoot && "root (the agent builds images and runs QEMU)",
  ].filter((x): x is string => typeof x === "string");
}

/**
 * Starts the stack. `apiConfig`, when given, is written as the control plane's YAML
 * configuration (DOPPIO_API_CONFIG; the stack's own settings still come from its
 * environment); it is called with the settings so it can name the stack's URLs.
 */
export async function startUpStack(
  opts: {
    apiConfig?: (settings: UpStack["settings"]) => Promise<Record<string, unknown>>;
    /** The agent's userModeHostPorts (scripts/local/stack.ts, LocalStackOptions). */
    guestHostPorts?: number[];
  } = {},
): Promise<UpStack> {
  const data = await mkdtemp(path.join(tmpdir(), "doppio-up-"));
  // The stack reads where to live and which ports to use when it is first imported.
  process.env.DOPPIO_UP_DATA = data;
  process.env.DOPPIO_UP_API_PORT = String(await freePort());
  process.env.DOPPIO_UP_EDGE_PORT = String(await freePort());
  process.env.DOPPIO_UP_CADDY_ADMIN_PORT = String(await freePort());
  process.env.DOPPIO_UP_AGENT_PORT = String(await freePort());
  process.env.DOPPIO_UP_METADATA_PORT = String(await freePort());
  const settings = await import("../../../../scripts/local/settings.ts");
  const stack = await import("../../../../scripts/local/stack.ts");
  if (opts.apiConfig) {
    const file = path.join(data, "api-config.yaml");
    await writeFile(file, toYaml(await opts.apiConfig(settings)), { mode: 0o600 });
    process.env.DOPPIO_API_CONFIG = file;
  }
  let adminPassword: string;
  try {
    adminPassword = (await stack.startLocalStack({ guestHostPorts: opts.guestHostPorts })).password;
  } catch (err) {
    // Whatever did start is stopped by PID before the error goes on, with the logs' ends.
    await stack.stopLocalStack();
    for (const log of ["api.log", "agent.log"]) {
      const text = await readFile(path.join(data, log), "utf8").catch(() => "");
      console.error(`${log} (end):\n${text.split("\n").slice(-30).join("\n")}`);
    }
    await rm(data, { recursive: true, force: true });
    throw err;
  }
  return {
    data,
    settings,
    stack,
    adminPassword,
    async close() {
      await stack.stopLocalStack();
      await rm(data, { recursive: true, force: true });
    },
  };
}

/** A request through the local edge (Caddy) with a box's Host header (fetch cannot set Host). */
export function viaEdge(
  host: string,
  urlPath = "/",
  opts: { method?: string; body?: string } = {},
): Promise<{ status: number; body: string }> {
  const port = Number(process.env.DOPPIO_UP_EDGE_PORT);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path: urlPath,
        method: opts.method ?? "GET",
        headers: { host: `${host}:${port}` },
      },
      (res) => {
        let body = "";
        res.on("data", (d) => {
          body += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end(opts.body);
  });
}

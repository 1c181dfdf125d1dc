import { readFileSync } from "node:fs";
import { DEFAULT_TEMPLATE, findTemplate } from "@doppio/contracts";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { cidrProblem } from "./cidr.ts";
import { parseCaddyAdminAddress } from "./edge/caddy-admin.ts";
import { AgentError } from "./errors.ts";
import { SERIAL_LOG_MAX_BYTES } from "./logs/rotate.ts";

/**
 * A template this host offers. Version, ports, memory and vCPUs default to the template's
 * descriptor (packages/contracts/src/templates.ts) when it has one, so `{name: code}` is a
 * complete entry.
 */
const Template = z
  .strictObject({
    name: z.string().min(1),
    version: z.string().min(1).optional(),
    readyPorts: z.array(z.number().int().min(1).max(65535)).optional(),
    memoryMb: z.number().int().positive().optional(),
    vcpu: z.number().int().positive().optional(),
  })
  .transform((t) => {
    const known = findTemplate(t.name);
    return {
      name: t.name,
      version: t.version ?? known?.version ?? "1",
      readyPorts: t.readyPorts ?? known?.readyPorts ?? [8000],
      memoryMb: t.memoryMb ?? known?.memoryMb ?? 2048,
      vcpu: t.vcpu ?? known?.vcpu ?? 1,
    };
  });

const HostPort = z.string().regex(/^[^\s:]+:\d{1,5}$/, "must be host:port");

/** The agent's whole configuration, parsed once at start (style guide §6). */
export const AgentConfig = z
  .strictObject({
    controlPlaneUrl: z.url(),
    /** The server's agent token from `POST /api/v1/servers` (bearer for /agent/v1). */
    serverToken: z.string().min(8),
    dataDir: z.string().min(1),
    /** Host domain: boxes answer at {slug}.site.{domain} and {slug}.code.{domain}. */
    domain: z.string().min(1),
    publicScheme: z.enum(["http", "https"]).default("https"),
    publicPort: z.number().int().min(1).max(65535).optional(),
    bridge: z
      .strictObject({
        name: z.string().min(1).max(15).default("br-devbox"),
        cidr: z
          .string()
          .default("10.0.0.0/16")
          .refine((c) => cidrProblem(c) === null, { error: (i) => `CIDR ${cidrProblem(String(i.input))}` }),
      })
      .prefault({}),
    dns: z.array(z.string()).default(["1.1.1.1", "9.9.9.9"]),
    backend: z.enum(["qemu", "firecracker"]).default("qemu"),
    networkMode: z.enum(["tap", "user"]).default("tap"),
    /**
     * `networkMode: user` only (local stacks and tests): host loopback ports that guests
     * reach at their gateway address. A box whose GitHub lives on one of them
     * (`http://127.0.0.1:PORT`: a local GitHub stand-in) is told its gateway's address.
     */
    userModeHostPorts: z.array(z.number().int().min(1).max(65535)).max(8).default([]),
    /**
     * Network namespace that holds the bridge and the VMMs (local stacks on shared machines,
     * where the VM pool must not touch the root namespace). Unset in production.
     */
    netns: z.string().min(1).optional(),
    /**
     * Caddy's admin API: `unix:/run/doppio/caddy-admin.sock` (production: a socket only root
     * can open, out of reach of every box and local user) or `http://127.0.0.1:PORT`.
     */
    caddyAdmin: z
      .string()
      .refine(
        (a) => parseCaddyAdminAddress(a) !== null,
        "must be unix:/absolute/path.sock or http://127.0.0.1:PORT",
      )
      .optional(),
    listen: HostPort.default("127.0.0.1:8090"),
    /**
     * The metadata service guests call (Git credentials) at http://<gateway>:<port>: bound
     * on the bridge's gateway address (tap) or on 127.0.0.1, where QEMU user-mode
     * networking sends the guest's gateway address (user).
     */
    metadata: z
      .strictObject({
        enabled: z.boolean().default(true),
        port: z.number().int().min(1).max(65535).default(8169),
      })
      .prefault({}),
    /** Bearer token for the agent's own HTTP API (everything except /health and edge routes). */
    apiToken: z.string().min(16),
    concurrency: z.number().int().min(1).max(64).default(4),
    reconcileIntervalMs: z.number().int().min(100).default(30_000),
    heartbeatIntervalMs: z.number().int().min(100).default(15_000),
    claimWaitMs: z.number().int().min(0).max(30_000).default(25_000),
    /** Only this template may cold-boot when it has no golden snapshot. */
    defaultTemplate: z.string().default(DEFAULT_TEMPLATE),
    templates: z
      .array(Template)
      .min(1)
      .default([Template.parse({ name: DEFAULT_TEMPLATE })]),
    /**
     * Warm pool (pool/warm.ts): clones per template kept restored and parked, ready for a
     * create to claim, each with the data volume of the template's default box size, or
     * `diskGb` when set (creates of another disk size take the golden path). The control
     * plane's per-template settings, when it sends them, replace `sizes`.
     */
    warmPool: z
      .strictObject({
        sizes: z.record(z.string(), z.number().int().min(0).max(32)).default({}),
        diskGb: z.number().int().min(1).optional(),
      })
      .prefault({}),
    /** What the host offers boxes; measured from the OS when unset. */
    capacity: z
      .strictObject({
        vcpu: z.number().int().nonnegative(),
        memoryMb: z.number().int().nonnegative(),
        diskGb: z.number().int().nonnegative(),
      })
      .optional(),
    logLevel: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
    /** A box's serial log is rotated past this size; the host keeps at most about twice it per box. */
    serialLogMaxBytes: z.number().int().min(4096).default(SERIAL_LOG_MAX_BYTES),
    /** Edge wiring (Caddy). Present only on hosts that route box traffic through Caddy. */
    edge: z
      .strictObject({
        /**
         * PEM file with the control plane's Ed25519 public key (verifies hand-off tokens).
         * Optional: every heartbeat answer carries the key too, and the latest one is used.
         */
        controlPlaneKeyFile: z.string().min(1).optional(),
        tls: z.discriminatedUnion("mode", [
          z.strictObject({ mode: z.literal("http"), listen: z.string() }),
          z.strictObject({
            mode: z.literal("https"),
            cloudflareApiToken: z.string().optional(),
            acmeEmail: z.string().optional(),
            acmeCa: z.string().optional(),
          }),
        ]),
        /** Control-plane sign-in hand-off (GET /api/v1/access/open?host=&next=). */
        signInUrl: z.url().optional(),
        checkIntervalMs: z.number().int().min(100).default(10_000),
      })
      .optional(),
  })
  .superRefine((c, ctx) => {
    if (!c.templates.some((t) => t.name === c.defaultTemplate)) {
      ctx.addIssue({
        code: "custom",
        path: ["defaultTemplate"],
        message: `"${c.defaultTemplate}" is not among templates`,
      });
    }
    if (c.userModeHostPorts.length > 0 && c.networkMode !== "user") {
      ctx.addIssue({
        code: "custom",
        path: ["userModeHostPorts"],
        message: "only with networkMode: user (a tap network gives guests no host port)",
      });
    }
    if (c.edge && !c.caddyAdmin) {
      ctx.addIssue({ code: "custom", path: ["caddyAdmin"], message: "required when edge is set" });
    }
  });
export type AgentConfig = z.infer<typeof AgentConfig>;

/** Environment variables that override the file, each mapped to one field. */
const ENV: Record<string, { path: string[]; type: "string" | "number" }> = {
  DOPPIO_AGENT_CONTROL_PLANE_URL: { path: ["controlPlaneUrl"], type: "string" },
  DOPPIO_AGENT_SERVER_TOKEN: { path: ["serverToken"], type: "string" },
  DOPPIO_AGENT_DATA_DIR: { path: ["dataDir"], type: "string" },
  DOPPIO_AGENT_DOMAIN: { path: ["domain"], type: "string" },
  DOPPIO_AGENT_BACKEND: { path: ["backend"], type: "string" },
  DOPPIO_AGENT_NETWORK_MODE: { path: ["networkMode"], type: "string" },
  DOPPIO_AGENT_NETNS: { path: ["netns"], type: "string" },
  DOPPIO_AGENT_BRIDGE: { path: ["bridge", "name"], type: "string" },
  DOPPIO_AGENT_CIDR: { path: ["bridge", "cidr"], type: "string" },
  DOPPIO_AGENT_CADDY_ADMIN: { path: ["caddyAdmin"], type: "string" },
  DOPPIO_AGENT_LISTEN: { path: ["listen"], type: "string" },
  DOPPIO_AGENT_METADATA_PORT: { path: ["metadata", "port"], type: "number" },
  DOPPIO_AGENT_API_TOKEN: { path: ["apiToken"], type: "string" },
  DOPPIO_AGENT_CONCURRENCY: { path: ["concurrency"], type: "number" },
  DOPPIO_AGENT_LOG_LEVEL: { path: ["logLevel"], type: "string" },
};

/** Config file path: `--config FILE` / `--config=FILE`, else DOPPIO_AGENT_CONFIG. */
function configPath(argv: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--config") return argv[i + 1];
    if (a.startsWith("--config=")) return a.slice("--config=".length);
  }
  return env.DOPPIO_AGENT_CONFIG || undefined;
}

export function parseConfig(raw: unknown, env: NodeJS.ProcessEnv = {}): AgentConfig {
  const merged = structuredClone((raw ?? {}) as Record<string, unknown>);
  if (typeof merged !== "object" || Array.isArray(merged)) {
    throw new AgentError("config_invalid", "invalid agent configuration: the file must hold a YAML mapping");
  }
  for (const [key, { path, type }] of Object.entries(ENV)) {
    const value = env[key];
    if (value === undefined || value === "") continue;
    let node = merged as Record<string, unknown>;
    for (const p of path.slice(0, -1)) {
      if (typeof node[p] !== "object" || node[p] === null) node[p] = {};
      node = node[p] as Record<string, unknown>;
    }
    node[path.at(-1)!] = type === "number" && /^\d+$/.test(value) ? Number(value) : value;
  }
  const parsed = AgentConfig.safeParse(merged);
  if (!parsed.success) {
    const fields = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`);
    throw new AgentError("config_invalid", `invalid agent configuration:\n  - ${fields.join("\n  - ")}`, {
      details: { fields },
    });
  }
  return parsed.data;
}

export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): AgentConfig {
  const file = configPath(argv, env);
  let raw: unknown = {};
  if (file) {
    try {
      raw = parseYaml(readFileSync(file, "utf8")) ?? {};
    } catch (err) {
      throw new AgentError("config_invalid", `cannot read agent configuration ${file}`, { cause: err });
    }
  }
  return parseConfig(raw, env);
}

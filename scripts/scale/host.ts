import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { tapNameForIp } from "../../apps/agent/src/net/naming.ts";

const run = promisify(execFile);

/**
 * Where the scale test looks at the host itself (VMM memory, what is left after delete):
 * this machine (the `make up` host) or a provisioned host over SSH as root.
 */
export interface HostAccess {
  /** `local`, or `user@host` reached with ssh. */
  target: string;
  /** The agent's data directory (its SQLite, boxes' disks). */
  agentDataDir: string;
  /** Caddy's admin address as the agent's config writes it (`unix:/path` or `host:port`). */
  caddyAdmin: string;
  /** The node that opens the agent's SQLite, and the directory it resolves better-sqlite3 from. */
  node: { bin: string; cwd: string };
  sshArgs?: string[];
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

export class Host {
  constructor(readonly access: HostAccess) {}

  /** Runs a shell command on the host and returns its stdout. */
  async sh(command: string): Promise<string> {
    const { target, sshArgs = [] } = this.access;
    const { stdout } =
      target === "local"
        ? await run("sh", ["-c", command], { maxBuffer: 64 << 20 })
        : await run("ssh", [...sshArgs, "-o", "BatchMode=yes", target, command], { maxBuffer: 64 << 20 });
    return stdout;
  }

  /** Each VMM on the host whose command line names a box directory of `slugs`, with its memory. */
  async vmms(slugs: string[]): Promise<Map<string, { pid: number; rssKb: number; pssKb: number }[]>> {
    const out = await this.sh(
      `for p in $(pgrep -f 'qemu-system|firecracker' || true); do
         a=$(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
         m=$(grep -E '^(Rss|Pss):' /proc/$p/smaps_rollup 2>/dev/null | tr -s ' ' | tr '\\n' ' ')
         echo "$p|$m|$a"
       done`,
    );
    const found = new Map<string, { pid: number; rssKb: number; pssKb: number }[]>();
    for (const line of out.split("\n")) {
      const [pid, mem, args] = line.split("|");
      if (!pid || !args) continue;
      const slug = slugs.find((s) => args.includes(`/${s}/`) || args.includes(`--id ${s} `));
      if (!slug) continue;
      const kb = (k: string) => Number(new RegExp(`${k}: (\\d+)`).exec(mem ?? "")?.[1] ?? 0);
      const list = found.get(slug) ?? [];
      list.push({ pid: Number(pid), rssKb: kb("Rss"), pssKb: kb("Pss") });
      found.set(slug, list);
    }
    return found;
  }

  /** What the agent's SQLite still holds for these boxes: IP allocations and box rows. */
  async agentRows(slugs: string[]): Promise<{ ipAllocations: string[]; boxes: string[]; jobsOpen: number }> {
    const script = `
      const Database = require("better-sqlite3");
      const db = new Database(process.argv[1] + "/agent.sqlite", { readonly: true, fileMustExist: true });
      const slugs = JSON.parse(process.argv[2]);
      const q = (sql) => db.prepare(sql).all(...slugs);
      const marks = slugs.map(() => "?").join(",");
      const out = {
        ipAllocations: q("SELECT slug || ' ' || ip AS r FROM ip_allocations WHERE slug IN (" + marks + ")").map((r) => r.r),
        boxes: q("SELECT slug AS r FROM boxes WHERE slug IN (" + marks + ")").map((r) => r.r),
        jobsOpen: q("SELECT count(*) AS n FROM jobs WHERE status != 'done' AND box IN (" + marks + ")")[0].n,
      };
      process.stdout.write(JSON.stringify(out));`;
    const { bin, cwd } = this.access.node;
    const out = await this.sh(
      `cd ${quote(cwd)} && ${quote(bin)} -e ${quote(script)} ${quote(this.access.agentDataDir)} ${quote(JSON.stringify(slugs))}`,
    );
    return JSON.parse(out);
  }

  /** Everything on the host that still names one of these boxes or their addresses. */
  async leftovers(slugs: string[], ips: string[]): Promise<Record<string, string[]>> {
    const dir = this.access.agentDataDir;
    const files = (
      await this.sh(
        `find ${quote(dir)} -mindepth 2 -maxdepth 4 \\( ${slugs.map((s) => `-name ${quote(s)}`).join(" -o ")} \\) 2>/dev/null || true`,
      )
    )
      .split("\n")
      .filter(Boolean);
    const taps = ips.map(tapNameForIp);
    const links = (await this.sh("ip -o link show"))
      .split("\n")
      .filter((l) => taps.some((t) => l.includes(`: ${t}:`) || l.includes(`: ${t}@`)));
    const hasIp = (l: string) =>
      ips.some((ip) => new RegExp(`(^|[^0-9.])${ip.replaceAll(".", "\\.")}([^0-9]|$)`).test(l));
    const routes = (await this.sh("ip route show table all")).split("\n").filter(hasIp);
    const firewall = (await this.sh("nft list ruleset 2>/dev/null || true")).split("\n").filter(hasIp);
    const caddy = await this.caddyConfig();
    const caddyRoutes = slugs.filter((s) => caddy.includes(`"${s}.`) || caddy.includes(`/${s}/`));
    const rows = await this.agentRows(slugs);
    const vmms = [...(await this.vmms(slugs)).entries()].map(
      ([s, v]) => `${s}: pid ${v.map((x) => x.pid).join(",")}`,
    );
    return {
      "VMM processes": vmms,
      "overlays, volumes, box directories": files,
      TAPs: links,
      "IP allocations (agent SQLite)": rows.ipAllocations,
      "box records (agent SQLite)": rows.boxes,
      routes,
      "firewall entries": firewall,
      "Caddy routes": caddyRoutes,
    };
  }

  /** Caddy's running config (JSON text) from its admin API. */
  async caddyConfig(): Promise<string> {
    const admin = this.access.caddyAdmin;
    const cmd = admin.startsWith("unix:")
      ? // Caddy accepts only an empty Host on its unix socket (apps/agent/src/edge/caddy-admin.ts).
        `curl -sf -H 'Host;' --unix-socket ${quote(admin.slice(5))} http://caddy/config/`
      : `curl -sf http://${admin}/config/`;
    return this.sh(cmd);
  }
}

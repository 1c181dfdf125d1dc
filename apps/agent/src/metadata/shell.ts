import type { BoxMetadata } from "../vmm/executor.ts";

/**
 * A box's metadata as the shell assignments images/minimal's json.awk makes from its JSON,
 * for a guest to source instead of parsing JSON on its way to READY (an awk run is the
 * slowest step of a clone's apply under TCG): `M_<path>='value'` for each scalar outside
 * `env` (path parts joined with `_`, non-alphanumerics as `_`, arrays by index),
 * `generation` first, then `M_env_file`: the text of /etc/profile.d/doppio.sh
 * (`export NAME='value'` for each env variable with a shell-safe name). Every value is
 * single-quoted; NUL, which no shell string can hold, becomes `?` as json.awk does. A
 * guest sources it only when its first line is `M_generation='...'` (never JSON).
 */
export function shellAssignments(meta: BoxMetadata): string {
  const { generation, env, ...rest } = meta;
  const lines: string[] = [];
  const walk = (path: string, value: unknown): void => {
    if (value !== null && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) walk(path ? `${path}.${k}` : k, v);
      return;
    }
    const text = typeof value === "string" ? value : JSON.stringify(value);
    lines.push(`M_${path.replace(/[^A-Za-z0-9]/g, "_")}=${shellQuote(text)}`);
  };
  walk("", { generation, ...rest });
  const envFile = Object.entries(env)
    .filter(([k]) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
    .map(([k, v]) => `export ${k}=${shellQuote(v)}\n`)
    .join("");
  lines.push(`M_env_file=${shellQuote(envFile)}`);
  return `${lines.join("\n")}\n`;
}

function shellQuote(v: string): string {
  return `'${v.replaceAll("\0", "?").replaceAll("'", "'\\''")}'`;
}

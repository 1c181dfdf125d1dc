import { BoxSize, type BoxSizeName, ENV_NAME_RE, slugProblem } from "@doppio/contracts";
import { usageError } from "../errors.ts";

export function parseSlug(name: string): string {
  const problem = slugProblem(name);
  if (problem) throw usageError(`invalid box name "${name}": ${problem}`, 'names look like "my-box-1"');
  return name;
}

export function parseSize(size: string): BoxSizeName {
  const parsed = BoxSize.safeParse(size);
  if (!parsed.success) {
    throw usageError(`unknown size "${size}"`, `pick one of: ${BoxSize.options.join(", ")}`);
  }
  return parsed.data;
}

/** `--env K=V` values into a record; the value may contain `=`, the name must be a valid variable. */
export function parseEnv(pairs: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw usageError(`malformed --env "${pair}"`, "write it as NAME=value, e.g. --env DEBUG=1");
    const name = pair.slice(0, eq);
    if (!ENV_NAME_RE.test(name)) {
      throw usageError(
        `invalid environment variable name "${name}"`,
        "names are letters, digits and _, and do not start with a digit",
      );
    }
    env[name] = pair.slice(eq + 1);
  }
  return env;
}

export const collect = (value: string, previous: string[] = []) => [...previous, value];

export function parsePort(raw: string): number {
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port < 1 || port > 65535) {
    throw usageError(`invalid port "${raw}"`, "pass a number from 1 to 65535");
  }
  return port;
}

/**
 * Request generation for the API fuzz test: a seeded PRNG, valid samples built from the
 * OpenAPI document's JSON schemas, and the ways to break them (wrong types, huge strings,
 * odd unicode, missing and extra fields, bad path and query values).
 */

export interface Schema {
  type?: string | string[];
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  items?: Schema;
  enum?: unknown[];
  const?: unknown;
  oneOf?: Schema[];
  anyOf?: Schema[];
  minLength?: number;
  minimum?: number;
  exclusiveMinimum?: boolean | number;
  minItems?: number;
  format?: string;
}

export interface Parameter {
  in: "path" | "query" | "header";
  name: string;
  schema: Schema;
}

/** mulberry32: small, fast and the same sequence for the same seed everywhere. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `n` items of `xs` in a seeded random order (all of them when n >= length). */
export function pick<T>(rng: () => number, xs: readonly T[], n: number): T[] {
  const copy = [...xs];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy.slice(0, n);
}

/** Values that pass the patterns the schemas only name (emails, slugs, DNS names). */
const KNOWN: Record<string, string> = {
  email: "fuzz@example.com",
  password: "fuzz password 1234",
  name: "fuzz-name",
  template: "minimal",
  domain: "fuzz.example.test",
  version: "1",
  source: "console",
};

/** A value the schema accepts, as far as the schema alone can tell. */
function sample(schema: Schema, key = ""): unknown {
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return schema.enum[0];
  const option = schema.oneOf?.[0] ?? schema.anyOf?.[0];
  if (option) return sample(option, key);
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case "object": {
      const out: Record<string, unknown> = {};
      for (const [k, s] of Object.entries(schema.properties ?? {})) out[k] = sample(s, k);
      if (typeof schema.additionalProperties === "object")
        out.FUZZ = sample(schema.additionalProperties, "FUZZ");
      return out;
    }
    case "array":
      return Array.from({ length: Math.max(1, schema.minItems ?? 1) }, () => sample(schema.items ?? {}, key));
    case "integer":
    case "number":
      return (schema.minimum ?? 0) + (schema.exclusiveMinimum ? 1 : 0) || 1;
    case "boolean":
      return true;
    case "string":
      if (KNOWN[key]) return KNOWN[key];
      if (schema.format === "date-time" || key === "at") return new Date().toISOString();
      if (schema.format === "uuid") return "00000000-0000-4000-8000-000000000000";
      return "x".repeat(Math.max(1, schema.minLength ?? 1));
    default:
      return "x";
  }
}

/** Strings that have broken parsers, databases, terminals and regular expressions. */
const NASTY_STRINGS: Record<string, string> = {
  huge: "x".repeat(60 * 1024),
  hugeBacktrack: `a@${".".repeat(60 * 1024)}@`,
  nul: "a\u0000b",
  loneHighSurrogate: "\ud800",
  loneLowSurrogate: "x\udfffy",
  rtlOverride: "\u202egnp.exe",
  emoji: "👩‍👩‍👧‍👦🏳️‍🌈",
  combining: "Z\u0337\u0322\u031b\u035aa\u0338\u0321\u0316l\u0335\u031b\u0339g\u0336\u034d",
  bom: "\ufeffname",
  lineSeparators: "a\u2028b\u2029c",
  controls: "\u0001\u001b[31m\u007f",
  empty: "",
  blank: "   ",
};

const WRONG_TYPES: unknown[] = [0, -1, 1e308, 3.5, true, null, [], {}, ["x"], { $ne: null }, "x"];

export interface BodyVariant {
  label: string;
  /** JSON body, or `raw` text sent as is with `contentType`. */
  json?: unknown;
  raw?: string;
  contentType?: string;
}

type Path = Array<string | number>;

function leafPaths(value: unknown, path: Path = [], out: Path[] = []): Path[] {
  if (path.length > 0) out.push(path);
  if (path.length >= 4) return out;
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) leafPaths(v, [...path, i], out);
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) leafPaths(v, [...path, k], out);
  }
  return out;
}

function withValue(root: unknown, path: Path, value: unknown): unknown {
  const copy = structuredClone(root) as Record<string | number, unknown>;
  let at = copy;
  for (const step of path.slice(0, -1)) at = at[step] as Record<string | number, unknown>;
  at[path.at(-1)!] = value;
  return copy;
}

function without(root: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _gone, ...rest } = root;
  return rest;
}

/**
 * The valid sample and up to `n` broken versions of it, chosen by `rng`. Only the chosen
 * ones are built (a 60 KB string copied into every candidate would cost the test's own
 * event loop more than the server's).
 */
export function bodyVariants(
  schema: Schema | undefined,
  rng: () => number,
  n: number,
  /** NASTY_STRINGS put into every leaf, besides the random picks. */
  everyLeaf: string[] = [],
): BodyVariant[] {
  const valid = schema ? sample(schema) : {};
  const candidates: Array<() => BodyVariant> = [
    () => ({ label: "empty object", json: {} }),
    () => ({ label: "array", json: [] }),
    () => ({ label: "string", json: "x" }),
    () => ({ label: "number", json: 1 }),
    () => ({ label: "null", json: null }),
    () => ({ label: "truncated JSON", raw: '{"a":' }),
    () => ({ label: "empty body", raw: "" }),
    () => ({ label: "deep nesting", raw: `${"[".repeat(20_000)}${"]".repeat(20_000)}` }),
    () => ({
      label: "prototype keys",
      raw: '{"__proto__":{"admin":true},"constructor":{"prototype":{"x":1}}}',
    }),
    () => ({ label: "text/plain", raw: JSON.stringify(valid), contentType: "text/plain" }),
    () => ({ label: "form", raw: "a=b", contentType: "application/x-www-form-urlencoded" }),
  ];
  if (valid && typeof valid === "object" && !Array.isArray(valid)) {
    const obj = valid as Record<string, unknown>;
    candidates.push(() => ({ label: "extra field", json: { ...obj, fuzzExtra: "x" } }));
    for (const key of schema?.required ?? []) {
      candidates.push(() => ({ label: `missing ${key}`, json: without(obj, key) }));
    }
  }
  for (const path of leafPaths(valid)) {
    const where = path.join(".");
    for (const [name, s] of Object.entries(NASTY_STRINGS)) {
      candidates.push(() => ({ label: `${where} = ${name}`, json: withValue(valid, path, s) }));
    }
    for (const w of WRONG_TYPES) {
      candidates.push(() => ({ label: `${where} = ${JSON.stringify(w)}`, json: withValue(valid, path, w) }));
    }
  }
  const always = leafPaths(valid).flatMap((path) =>
    everyLeaf.map((name) => ({
      label: `${path.join(".")} = ${name}`,
      json: withValue(valid, path, NASTY_STRINGS[name]),
    })),
  );
  return [{ label: "valid", json: valid }, ...always, ...pick(rng, candidates, n).map((make) => make())];
}

/** Raw (already percent-encoded) path segments that are not what a route expects. */
export const PATH_NASTIES: Record<string, string> = {
  short: "x",
  upper: "UPPER",
  dotdot: "..",
  encodedDotdot: "%2e%2e%2f%2e%2e",
  nul: "%00",
  loneSurrogate: "%ED%A0%80",
  invalidUtf8: "%FF%FE",
  emoji: "%F0%9F%98%80",
  rtl: "%E2%80%AEx",
  badPercent: "%",
  space: "a%20b",
  long: "a".repeat(2000),
  overHeaderLimit: "b".repeat(20_000),
  nilUuid: "00000000-0000-0000-0000-000000000000",
};

/** Query strings with each parameter of the route broken one way. */
export function queryVariants(params: Parameter[], rng: () => number, n: number): string[] {
  const names = params.filter((p) => p.in === "query").map((p) => p.name);
  const bad = [
    "abc",
    "-1",
    "1e400",
    "",
    "%00",
    "%ED%A0%80",
    "9".repeat(400),
    "x".repeat(10_000),
    "%F0%9F%98%80",
  ];
  const out = names.flatMap((name) => [...bad.map((v) => `${name}=${v}`), `${name}=1&${name}=2`]);
  out.push("fuzzExtra=1");
  return pick(rng, out, n);
}

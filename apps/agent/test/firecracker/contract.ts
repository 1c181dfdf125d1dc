import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv, type ValidateFunction } from "ajv";
import { parse } from "yaml";

/**
 * Validates requests against Firecracker's published API description (Swagger 2.0).
 * The description lives outside the repo (../shared/specs), so it is loaded at test
 * time and never copied in.
 */

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const DESCRIPTION_PATH = path.resolve(REPO_ROOT, "../shared/specs/firecracker-api-v1.16.1.yaml");

type Schema = Record<string, unknown>;
interface Parameter {
  name: string;
  in: "body" | "path" | "query";
  required?: boolean;
  type?: string;
  schema?: Schema;
}
interface Operation {
  summary?: string;
  description?: string;
  operationId: string;
  parameters?: Parameter[];
  responses: Record<string, { schema?: Schema }>;
}
interface Description {
  swagger: string;
  info: { version: string };
  paths: Record<string, Record<string, Operation>>;
  definitions: Record<string, Schema>;
}

export function loadDescription(): { doc: Description } | { missing: string } {
  if (!existsSync(DESCRIPTION_PATH))
    return { missing: `Firecracker API description not found at ${DESCRIPTION_PATH}` };
  const doc = parse(readFileSync(DESCRIPTION_PATH, "utf8")) as Description;
  if (doc.swagger !== "2.0") return { missing: `${DESCRIPTION_PATH} is not a Swagger 2.0 document` };
  return { doc };
}

export interface MatchedOperation {
  method: string;
  template: string;
  pathParams: Record<string, string>;
  op: Operation;
}

export type Verdict =
  | { ok: true; match: MatchedOperation }
  | { ok: false; match: MatchedOperation | null; error: string };

export interface ValidatorOptions {
  /**
   * The description leaves `additionalProperties` unset on most definitions, which JSON
   * Schema reads as "allowed". Firecracker itself rejects unknown fields, so by default
   * the validator does too wherever the description is silent; an explicit
   * `additionalProperties: true` (the MMDS store) is kept as written.
   */
  rejectUndeclaredFields?: boolean;
}

export class ContractValidator {
  readonly version: string;
  private readonly doc: Description;
  private readonly routes: Array<{ re: RegExp; template: string; names: string[] }>;
  private readonly ajv: Ajv;
  private readonly compiled = new Map<string, ValidateFunction>();

  constructor(doc: Description, opts: ValidatorOptions = {}) {
    this.doc = doc;
    this.version = doc.info.version;
    this.routes = Object.keys(doc.paths).map((template) => {
      const names: string[] = [];
      const re = template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
        names.push(name);
        return "([^/]+)";
      });
      return { re: new RegExp(`^${re}$`), template, names };
    });
    this.ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false, strictRequired: false });
    // Swagger's informational keyword; not a JSON Schema keyword.
    this.ajv.addKeyword("example");
    this.ajv.addFormat("int32", {
      type: "number",
      validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31,
    });
    this.ajv.addFormat("int64", { type: "number", validate: (n: number) => Number.isSafeInteger(n) });
    const definitions = structuredClone(doc.definitions);
    for (const schema of Object.values(definitions)) {
      visitObjects(schema, (s) => {
        // The description writes a regular expression in `format` (MmdsConfig.ipv4_address).
        if (typeof s.format === "string" && s.format.includes("(")) {
          const re = new RegExp(`^${s.format}$`);
          this.ajv.addFormat(s.format, { type: "string", validate: (v: string) => re.test(v) });
        }
        if (opts.rejectUndeclaredFields !== false && s.properties && !("additionalProperties" in s)) {
          s.additionalProperties = false;
        }
      });
    }
    this.ajv.addSchema({ $id: "firecracker", definitions });
  }

  /** Definition names the description declares (for tests that check coverage). */
  definitionNames(): string[] {
    return Object.keys(this.doc.definitions);
  }

  match(method: string, urlPath: string): MatchedOperation | null {
    for (const route of this.routes) {
      const m = route.re.exec(urlPath);
      if (!m) continue;
      const op = this.doc.paths[route.template]?.[method.toLowerCase()];
      if (!op) return null;
      const pathParams: Record<string, string> = {};
      route.names.forEach((name, i) => {
        pathParams[name] = decodeURIComponent(m[i + 1] ?? "");
      });
      return { method: method.toUpperCase(), template: route.template, pathParams, op };
    }
    return null;
  }

  /** `rawBody` is the request body text ("" when none). */
  validateRequest(method: string, urlPath: string, rawBody: string): Verdict {
    const match = this.match(method, urlPath);
    if (!match)
      return { ok: false, match: null, error: `Invalid request method and/or path: ${method} ${urlPath}.` };
    const bodyParam = match.op.parameters?.find((p) => p.in === "body");
    for (const p of match.op.parameters ?? []) {
      if (p.in === "path" && p.required && !match.pathParams[p.name]) {
        return { ok: false, match, error: `Missing path parameter ${p.name}.` };
      }
    }
    if (rawBody.length === 0) {
      if (bodyParam?.required) return { ok: false, match, error: "Missing request body." };
      return { ok: true, match };
    }
    if (!bodyParam?.schema) return { ok: false, match, error: `${method} ${match.template} takes no body.` };
    let body: unknown;
    try {
      body = JSON.parse(rawBody);
    } catch {
      return { ok: false, match, error: "Request body is not valid JSON." };
    }
    const validate = this.compile(bodyParam.schema);
    if (!validate(body)) {
      const detail = (validate.errors ?? [])
        .map((e) => `${e.instancePath || "(body)"} ${e.message ?? "invalid"}${paramsText(e.params)}`)
        .join("; ");
      return {
        ok: false,
        match,
        error: `Request body does not match ${refName(bodyParam.schema)}: ${detail}`,
      };
    }
    return { ok: true, match };
  }

  /** Validates a response body we are about to send against the operation's declared schema. */
  validateResponse(match: MatchedOperation, status: number, body: unknown): string | null {
    const declared = match.op.responses[String(status)] ?? match.op.responses.default;
    if (!declared) return `status ${status} is not declared for ${match.method} ${match.template}`;
    if (!declared.schema) return body === undefined ? null : `status ${status} declares no body`;
    const validate = this.compile(declared.schema);
    return validate(body) ? null : `response does not match: ${this.ajv.errorsText(validate.errors)}`;
  }

  private compile(schema: Schema): ValidateFunction {
    const key = JSON.stringify(schema);
    let fn = this.compiled.get(key);
    if (!fn) {
      const ref = typeof schema.$ref === "string" ? schema.$ref : null;
      fn = this.ajv.compile(ref ? { $ref: `firecracker${ref}` } : { ...rewriteRefs(schema) });
      this.compiled.set(key, fn);
    }
    return fn;
  }
}

function refName(schema: Schema): string {
  return typeof schema.$ref === "string" ? schema.$ref.replace("#/definitions/", "") : "the body schema";
}

function paramsText(params: Record<string, unknown>): string {
  const extra = params.additionalProperty ?? params.allowedValues ?? params.missingProperty;
  return extra === undefined ? "" : ` (${JSON.stringify(extra)})`;
}

function rewriteRefs(schema: Schema): Schema {
  const copy = structuredClone(schema);
  visitObjects(copy, (s) => {
    if (typeof s.$ref === "string" && s.$ref.startsWith("#/")) s.$ref = `firecracker${s.$ref}`;
  });
  return copy;
}

function visitObjects(node: unknown, fn: (s: Record<string, unknown>) => void): void {
  if (Array.isArray(node)) {
    for (const item of node) visitObjects(item, fn);
    return;
  }
  if (node && typeof node === "object") {
    const obj = node as Record<string, unknown>;
    fn(obj);
    for (const [key, value] of Object.entries(obj)) {
      // `properties` maps names to schemas; a property called e.g. "format" is not a keyword.
      if (key === "enum" || key === "default" || key === "example") continue;
      visitObjects(value, fn);
    }
  }
}

/**
 * Why the Firecracker contract tests cannot run here (printed, so a skip is never silent), or
 * null: the API description missing, or not root (jail files are chowned to per-VM uids).
 */
export function contractSkipReason(loaded: ReturnType<typeof loadDescription>, what: string): string | null {
  const reason = !("doc" in loaded)
    ? loaded.missing
    : process.getuid?.() !== 0
      ? "needs root (jail files are chowned to per-VM uids)"
      : null;
  if (reason) console.warn(`SKIPPING ${what}: ${reason}`);
  return reason;
}

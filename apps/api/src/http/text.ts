import type { FastifyInstance } from "fastify";
import { AppError } from "../errors.ts";

/** An unpaired UTF-16 surrogate (linear: one character of look-around). */
const UNPAIRED = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True for NUL or an unpaired surrogate anywhere in a parsed body, query or params (keys too). */
function hasUnstorableText(root: unknown): boolean {
  // An explicit stack: a 64 KB body can nest tens of thousands of arrays deep.
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === "string") {
      if (value.includes("\u0000") || UNPAIRED.test(value)) return true;
    } else if (Array.isArray(value)) {
      for (const item of value) stack.push(item);
    } else if (value !== null && typeof value === "object") {
      for (const [key, inner] of Object.entries(value)) stack.push(key, inner);
    }
  }
  return false;
}

/**
 * Postgres stores neither NUL (text, jsonb) nor unpaired surrogates (jsonb; drivers turn them
 * into U+FFFD in text), so such input ended as a database error and a 500. No valid request
 * needs either: refuse them on every route before validation.
 */
export function refuseUnstorableText(app: FastifyInstance): void {
  app.addHook("preValidation", async (req) => {
    for (const [where, value] of [
      ["body", req.body],
      ["querystring", req.query],
      ["params", req.params],
    ] as const) {
      if (hasUnstorableText(value)) {
        throw new AppError("validation_failed", `invalid request ${where}`, {
          issues: [
            { where, path: "/", message: "text may not contain NUL or unpaired surrogate characters" },
          ],
        });
      }
    }
  });
}

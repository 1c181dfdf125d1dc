import type { FastifyRequest } from "fastify";
import { AppError } from "../errors.ts";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Why a cookie-authenticated request may not change state, or null when it may. Box hosts
 * (`{slug}.site.{domain}`) are the same *site* as the dashboard, so SameSite=Lax still sends
 * the session cookie with a box page's cross-origin POST; only the origin tells them apart.
 * A state change must therefore be JSON (a form or `no-cors` fetch cannot send that type)
 * and come from the control plane's own origin: `Origin` when the browser sends one,
 * `Sec-Fetch-Site: same-origin` otherwise; a request with neither is refused. Browsers
 * never let a page set either header. Bearer tokens are not sent by browsers on their own,
 * so they are not checked.
 */
function csrfProblem(req: FastifyRequest, publicOrigin: string): string | null {
  if (SAFE_METHODS.has(req.method)) return null;
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json") return "send JSON (content-type: application/json)";
  const origin = req.headers.origin;
  if (origin !== undefined) return origin === publicOrigin ? null : "cross-origin request refused";
  const site = req.headers["sec-fetch-site"];
  if (site === "same-origin") return null;
  return site === undefined ? "request origin unknown (no Origin header)" : "cross-origin request refused";
}

export function checkCsrf(req: FastifyRequest, publicOrigin: string): void {
  const problem = csrfProblem(req, publicOrigin);
  if (problem) throw new AppError("forbidden", problem);
}

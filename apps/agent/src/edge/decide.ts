import { hostKey } from "@doppio/access-token";
import { type BoxHost, guestPort, parseBoxHost } from "@doppio/contracts";
import { AUTH_PATH, type EdgeAccess, safeNext } from "./access.ts";
import { type Page, pages } from "./pages.ts";
import type { RouteTable } from "./routes.ts";

/** What Caddy tells the agent about the request it is holding (forward-auth headers). */
export interface EdgeRequest {
  host: string;
  /** Request URI as the client sent it (path + query). */
  uri: string;
  method: string;
  https: boolean;
  cookie: string | undefined;
  accept: string | undefined;
}

export type Decision =
  | { kind: "pass"; upstream: string; box: BoxHost }
  | { kind: "page"; page: Page; reason: string }
  /** A hibernated box this request may wake: ask for a resume, answer 503 + Retry-After. */
  | { kind: "wake"; slug: string; page: Page; html: boolean; reason: "waking" }
  | { kind: "redirect"; location: string; setCookie: string | null; reason: string };

export interface DecideDeps {
  domain: string;
  routes: RouteTable;
  access: EdgeAccess;
  /**
   * Where to send a browser that needs to sign in (the control plane's "open box" URL);
   * without it, such requests get a 401 page.
   */
  signInUrl?: (target: { slug: string; host: string; uri: string }) => string;
}

/** One decision per proxied request. Order matters: auth before state, so strangers learn nothing. */
export function decide(req: EdgeRequest, deps: DecideDeps): Decision {
  const box = parseBoxHost(req.host, deps.domain);
  const route = box ? deps.routes.get(box.slug) : undefined;
  if (!box || !route) return { kind: "page", page: pages.noSuchBox(req.host), reason: "no_such_box" };

  const q = req.uri.indexOf("?");
  const path = q === -1 ? req.uri : req.uri.slice(0, q);
  const aud = box.kind === "site" ? "site" : "code";
  const principal = { slug: box.slug, owner: route.owner, aud, host: hostKey(box) } as const;

  if (path === AUTH_PATH) {
    const params = new URLSearchParams(q === -1 ? "" : req.uri.slice(q + 1));
    const result = deps.access.exchange(params.get("token") ?? "", principal, req.https);
    if (!result.ok) return { kind: "page", page: pages.badLink(result.reason), reason: result.reason };
    return {
      kind: "redirect",
      location: safeNext(params.get("next")),
      setCookie: result.setCookie,
      reason: "signed_in",
    };
  }

  const isPrivate = box.kind !== "site" || !route.sitePublic;
  const wantsPage = req.method === "GET" && (req.accept ?? "").includes("text/html");
  let owner: boolean | undefined;
  const isOwner = () => {
    owner ??= deps.access.cookieAllows(req.cookie, principal);
    return owner;
  };
  if (isPrivate && !isOwner()) {
    if (deps.signInUrl && wantsPage) {
      const location = deps.signInUrl({ slug: box.slug, host: req.host, uri: req.uri });
      return { kind: "redirect", location, setCookie: null, reason: "sign_in" };
    }
    return { kind: "page", page: pages.signInRequired(), reason: "sign_in" };
  }

  if (route.state === "hibernated") {
    // Past the check above a private URL's caller is the owner; a public site wakes for
    // anyone only when its box says so, else for its owner (a cookie from the dashboard).
    if ((route.publicWake === true && !isPrivate) || isOwner()) {
      return {
        kind: "wake",
        slug: box.slug,
        page: pages.waking(box.slug),
        html: wantsPage,
        reason: "waking",
      };
    }
    return { kind: "page", page: pages.hibernated(box.slug), reason: "hibernated" };
  }
  if (route.state !== "running") return { kind: "page", page: pages.stopped(box.slug), reason: "stopped" };
  const port = guestPort(box, path);
  const upstream = route.upstream(port);
  if (!upstream) return { kind: "page", page: pages.portClosed(port), reason: "port_closed" };
  return { kind: "pass", upstream, box };
}

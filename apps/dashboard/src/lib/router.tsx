import { type AnchorHTMLAttributes, type MouseEvent, useSyncExternalStore } from "react";
import { safeNext } from "./next.ts";

/** A very small history router: the dashboard has a handful of routes under /dashboard. */
const BASE = "/dashboard";

const listeners = new Set<() => void>();
const notify = () => {
  for (const l of listeners) l();
};
if (typeof window !== "undefined") window.addEventListener("popstate", notify);

function subscribe(listener: () => void) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

const snapshot = () => window.location.pathname + window.location.search;

/** Current path relative to the dashboard base, plus the search string. */
export function useLocation(): { path: string; search: URLSearchParams } {
  const full = useSyncExternalStore(subscribe, snapshot);
  const url = new URL(full, window.location.origin);
  let path = url.pathname.startsWith(BASE) ? url.pathname.slice(BASE.length) : url.pathname;
  if (path === "") path = "/";
  return { path, search: url.searchParams };
}

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  const href = to.startsWith(BASE) ? to : `${BASE}${to}`;
  if (opts.replace) window.history.replaceState(null, "", href);
  else window.history.pushState(null, "", href);
  window.scrollTo(0, 0);
  notify();
}

/**
 * Where to go after signing in (`safeNext`: dashboard pages and the box hand-off only). The
 * hand-off, /api/v1/access/open, is outside the SPA and needs a full page load.
 */
export function goNext(next: string | null): void {
  const target = safeNext(next, window.location.origin);
  if (!target) {
    navigate("/", { replace: true });
  } else if (target === BASE || target.startsWith(`${BASE}/`)) {
    navigate(target, { replace: true });
  } else {
    window.location.assign(target);
  }
}

type LinkProps = Omit<AnchorHTMLAttributes<HTMLAnchorElement>, "href"> & { to: string };

/** A real link (keyboard, middle-click, copy address) that navigates in place on a plain click. */
export function Link({ to, onClick, ...rest }: LinkProps) {
  const href = `${BASE}${to}`;
  const handle = (e: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return <a href={href} onClick={handle} {...rest} />;
}

/** Where a `next=` parameter may send a user who just signed in (the rest go to the boxes). */
const ALLOWED = [/^\/dashboard(?:\/|$)/, /^\/api\/v1\/access\/open$/];

/**
 * The same-origin path to go to after signing in, or null. Only dashboard pages and the
 * private-box hand-off (`/api/v1/access/open`, which sends signed-out visitors here) are
 * allowed. The string is parsed the way the browser will parse it and the *parsed* path is
 * returned, so whatever a browser would make of `//evil`, `/\evil` (a backslash counts as a
 * slash), `/<tab>/evil` (tabs and newlines are dropped), `https://…` or dot segments, it
 * cannot leave this origin or reach another route.
 */
export function safeNext(next: string | null, origin: string): string | null {
  if (!next?.startsWith("/")) return null;
  let url: URL;
  try {
    url = new URL(next, origin);
  } catch {
    return null;
  }
  if (url.origin !== origin || !ALLOWED.some((re) => re.test(url.pathname))) return null;
  return `${url.pathname}${url.search}${url.hash}`;
}

import { request } from "node:http";

/**
 * Requests to box URLs through the host's edge (Caddy). With `connect` (`host:port`) the
 * request goes there with the URL's Host header, as a browser resolving the wildcard name
 * to that host would send it (`*.localhost` on the make-up host); without, to the URL.
 */
export interface EdgeAnswer {
  status: number;
  body: string;
  location: string | null;
  cookies: string[];
}

export function viaEdge(url: string, opts: { connect?: string; cookie?: string } = {}): Promise<EdgeAnswer> {
  const u = new URL(url);
  if (u.protocol !== "http:" && opts.connect)
    throw new Error(`--edge works with http box URLs only (${u.protocol} given)`);
  if (!opts.connect)
    return fetch(url, { redirect: "manual", headers: opts.cookie ? { cookie: opts.cookie } : {} }).then(
      async (r) => ({
        status: r.status,
        body: await r.text(),
        location: r.headers.get("location"),
        cookies: r.headers.getSetCookie(),
      }),
    );
  const [host, port] = opts.connect.split(/:(?=\d+$)/);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host,
        port: Number(port ?? 80),
        path: `${u.pathname}${u.search}`,
        headers: { host: u.host, ...(opts.cookie ? { cookie: opts.cookie } : {}) },
        timeout: 30_000,
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d) => {
          body += d;
        });
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            body,
            location: res.headers.location ?? null,
            cookies: res.headers["set-cookie"] ?? [],
          }),
        );
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer from ${url} via ${opts.connect} in 30 s`)));
    req.on("error", reject);
    req.end();
  });
}

/**
 * Opens a private code URL as its owner would: the control plane's access/open redirects
 * the signed-in owner to the box host with a one-time hand-off token, the edge trades it for
 * a cookie bound to that host and redirects to the page, which is then fetched with it.
 */
export async function openAsOwner(
  apiUrl: string,
  session: Record<string, string>,
  boxUrl: string,
  connect?: string,
): Promise<EdgeAnswer> {
  const u = new URL(boxUrl);
  const open = new URL("/api/v1/access/open", apiUrl);
  open.searchParams.set("host", u.hostname);
  open.searchParams.set("next", "/");
  const res = await fetch(open, { redirect: "manual", headers: session });
  const handoff = res.headers.get("location");
  if (res.status !== 302 || !handoff) throw new Error(`access/open answered ${res.status}, not a redirect`);
  const exchanged = await viaEdge(new URL(handoff, boxUrl).toString(), { connect });
  const cookie = exchanged.cookies.map((c) => c.split(";")[0]).join("; ");
  if (!cookie) throw new Error(`the edge set no cookie for the hand-off (${exchanged.status})`);
  return viaEdge(new URL(exchanged.location ?? "/", boxUrl).toString(), { connect, cookie });
}

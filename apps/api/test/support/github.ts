import { randomBytes } from "node:crypto";
import type { ApiConfig } from "../../src/config.ts";
import type { TestClient } from "./client.ts";
import type { GitHubStandIn, StandInUser } from "./github-standin.ts";

/** The control plane's `github` section for a stand-in (secrets inline; a fresh secrets key). */
export function githubConfig(
  gh: GitHubStandIn,
  secretsKey = randomBytes(32).toString("base64"),
): Partial<ApiConfig> {
  return {
    github: {
      appId: gh.appId,
      appSlug: gh.appSlug,
      clientId: gh.clientId,
      clientSecret: gh.clientSecret,
      privateKey: gh.privateKeyPem,
      webhookSecret: gh.webhookSecret,
      secretsKey,
      webUrl: gh.webUrl,
      apiUrl: gh.apiUrl,
    },
  };
}

export interface Hop {
  status: number;
  location: string | null;
  setCookies: string[];
}

/** One browser request to the control plane with explicit cookies, redirects not followed. */
export async function browserGet(base: string, path: string, cookies: string[] = []): Promise<Hop> {
  const res = await fetch(new URL(path, base), {
    redirect: "manual",
    headers: cookies.length ? { cookie: cookies.join("; ") } : {},
  });
  await res.text();
  return {
    status: res.status,
    location: res.headers.get("location"),
    setCookies: res.headers.getSetCookie(),
  };
}

const cookiePair = (setCookie: string) => setCookie.split(";")[0]!;
const oauthCookieOf = (hop: Hop) =>
  hop.setCookies.map(cookiePair).find((c) => c.startsWith("doppio_github_oauth="));
export const sessionCookieOf = (hop: Hop) =>
  hop.setCookies.map(cookiePair).find((c) => c.startsWith("doppio_session=") && !c.endsWith("="));

/**
 * The whole OAuth web flow as a browser does it: start at the control plane, "approve" at
 * the stand-in as `user`, come back to the callback with the flow's cookie.
 */
export async function oauthFlow(
  base: string,
  gh: GitHubStandIn,
  user: StandInUser,
  opts: { intent?: "login" | "link"; session?: string | null } = {},
): Promise<{ start: Hop; callbackPath: string; done: Hop; oauthCookie: string }> {
  const session = opts.session ? [opts.session] : [];
  const start = await browserGet(base, `/api/v1/auth/github?intent=${opts.intent ?? "login"}`, session);
  if (start.status !== 302 || !start.location) throw new Error(`sign-in start: ${start.status}`);
  const oauthCookie = oauthCookieOf(start)!;
  const back = new URL(gh.authorize(start.location, user));
  const callbackPath = `${back.pathname}${back.search}`;
  const done = await browserGet(base, callbackPath, [...session, oauthCookie]);
  return { start, callbackPath, done, oauthCookie };
}

/** Links GitHub to the signed-in `client` and connects `installationId` to it, as the dashboard does. */
export async function linkAndConnect(
  client: TestClient,
  gh: GitHubStandIn,
  user: StandInUser,
  installationId: number,
): Promise<void> {
  const linked = await oauthFlow(client.baseUrl, gh, user, { intent: "link", session: client.sessionCookie });
  if (linked.done.location !== "/dashboard/settings?github=linked") {
    throw new Error(`link failed: ${linked.done.location}`);
  }
  await connectInstallation(client, installationId);
}

export async function connectInstallation(client: TestClient, installationId: number): Promise<Hop> {
  const connect = await client.post("/api/v1/github/connect", {});
  if (connect.status !== 200) throw new Error(`connect: ${connect.status} ${JSON.stringify(connect.body)}`);
  const state = new URL(connect.body.url).searchParams.get("state")!;
  const setup = await browserGet(
    client.baseUrl,
    `/api/v1/github/setup?installation_id=${installationId}&setup_action=install&state=${encodeURIComponent(state)}`,
    [client.sessionCookie!],
  );
  if (setup.location !== "/dashboard/settings?github=connected") {
    throw new Error(`setup: ${setup.status} ${setup.location}`);
  }
  return setup;
}

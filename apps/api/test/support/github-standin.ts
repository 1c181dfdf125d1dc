import {
  createHash,
  createHmac,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
  verify,
} from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { components } from "@octokit/openapi-types";

/**
 * A stand-in for GitHub (github.com and its REST API) for the endpoints the control plane
 * uses, answering with the shapes of GitHub's published REST description (the types of
 * @octokit/openapi-types, generated from it; only the fields named in each Pick are sent).
 * The API lives under `/api/v3` as on GitHub Enterprise Server, so the tests also exercise
 * the configurable base URLs. It checks what GitHub checks: the app's JWT (RS256 with the
 * app's key, at most 10 minutes), installation tokens (expiry, revocation, repositories and
 * permissions), OAuth codes (single use, client secret, redirect URI, PKCE S256).
 */

type S = components["schemas"];
type SimpleUser = Pick<S["simple-user"], "login" | "id" | "type" | "site_admin">;
type Repository = Pick<S["repository"], "id" | "name" | "full_name" | "private"> & { owner: SimpleUser };
type Installation = Pick<
  S["installation"],
  | "id"
  | "target_type"
  | "target_id"
  | "repository_selection"
  | "permissions"
  | "events"
  | "suspended_at"
  | "app_id"
  | "app_slug"
> & { account: SimpleUser };
type InstallationToken = Pick<
  S["installation-token"],
  "token" | "expires_at" | "permissions" | "repository_selection"
> & {
  repositories: Repository[];
};
type PrivateUser = Pick<S["private-user"], "login" | "id" | "name" | "email" | "type" | "site_admin">;
type Email = S["email"];

export interface StandInUser {
  id: number;
  login: string;
  name: string | null;
  emails: Email[];
}
interface StandInInstallation {
  id: number;
  account: StandInUser;
  repos: Repository[];
  selection: "all" | "selected";
  removed: boolean;
  suspended: boolean;
}
interface IssuedToken {
  installationId: number;
  repos: string[];
  permissions: Record<string, string>;
  expiresAt: number;
}

const APP_PERMISSIONS = { contents: "write", metadata: "read" } as const;

export class GitHubStandIn {
  readonly appId = 424242;
  readonly appSlug = "doppio-test";
  readonly clientId = "Iv23liStandInClient";
  readonly clientSecret = randomBytes(20).toString("hex");
  readonly webhookSecret = randomBytes(20).toString("hex");
  /** The app's private key as GitHub hands it out (PKCS#1 PEM), and its public half. */
  readonly privateKeyPem: string;
  readonly #publicKey: KeyObject;
  /** Moves the stand-in's clock (token expiry) without touching the control plane's. */
  offsetMs = 0;
  /** Who is "signed in to GitHub" in the browser that visits the authorize and install pages. */
  browserUser: StandInUser | null = null;
  /** Where the install page sends the browser back (the app's setup URL). */
  setupUrl = "";
  /** Every JWT the app presented, decoded (for assertions on iat/exp/iss). */
  readonly jwts: Array<{ iat: number; exp: number; iss: string }> = [];
  /** Every installation-token request: which installation, repositories and permissions. */
  readonly tokenRequests: Array<{
    installationId: number;
    repositories?: string[];
    permissions?: Record<string, string>;
  }> = [];

  readonly users = new Map<number, StandInUser>();
  readonly installations = new Map<number, StandInInstallation>();
  /** User access tokens (ghu_) and refresh tokens (ghr_): whose, and until when (stand-in clock). */
  readonly #userTokens = new Map<string, { userId: number; expiresAt: number }>();
  readonly #refreshTokens = new Map<string, { userId: number; expiresAt: number; access: string }>();
  /** Every refresh-token grant, accepted or not. */
  readonly refreshes: Array<{ ok: boolean; error?: string }> = [];
  readonly #tokens = new Map<string, IssuedToken>();
  readonly #codes = new Map<
    string,
    { userId: number; redirectUri: string; challenge: string | null; used: boolean; expiresAt: number }
  >();
  #nextId = 1000;
  #server: Server | undefined;
  url = "";
  /**
   * Git over smart HTTP on the web origin, as github.com and GitHub Enterprise Server serve
   * it (`/<owner>/<repo>.git/...`): the test's Git server, when set.
   */
  git: ((req: IncomingMessage, res: ServerResponse) => Promise<void>) | null = null;

  constructor() {
    const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    this.privateKeyPem = privateKey.export({ type: "pkcs1", format: "pem" }).toString();
    this.#publicKey = publicKey;
  }

  get webUrl() {
    return this.url;
  }
  get apiUrl() {
    return `${this.url}/api/v3`;
  }
  now() {
    return Date.now() + this.offsetMs;
  }

  async start(): Promise<void> {
    this.#server = createServer((req, res) => {
      if (this.git && /^\/[^/?]+\/[^/?]+\.git\//.test(req.url ?? "")) {
        this.git(req, res).catch((err) => {
          if (!res.headersSent) res.writeHead(500);
          res.end(String(err));
        });
        return;
      }
      this.#route(req, res).catch((err) => json(res, 500, { message: String(err) }));
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, "127.0.0.1", resolve));
    const addr = this.#server.address();
    this.url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }

  // ---- test controls ------------------------------------------------------------------

  addUser(login: string, emails: Array<Partial<Email> & { email: string }> = []): StandInUser {
    const user: StandInUser = {
      id: this.#nextId++,
      login,
      name: `${login} name`,
      emails: emails.map((e) => ({ primary: false, verified: true, visibility: null, ...e })),
    };
    this.users.set(user.id, user);
    return user;
  }

  /** The app installed on `account` with access to `repos` (names under that account). */
  install(account: StandInUser, repos: string[]): StandInInstallation {
    const inst: StandInInstallation = {
      id: this.#nextId++,
      account,
      selection: "selected",
      removed: false,
      suspended: false,
      repos: repos.map((name) => this.#repo(account, name)),
    };
    this.installations.set(inst.id, inst);
    return inst;
  }

  /** Uninstalled on GitHub: its tokens stop working at once, and no new ones are issued. */
  uninstall(installationId: number): void {
    const inst = this.installations.get(installationId);
    if (inst) inst.removed = true;
    for (const [token, t] of this.#tokens)
      if (t.installationId === installationId) this.#tokens.delete(token);
  }

  /** Every user access and refresh token issued to a GitHub user (to look for them where they must not be). */
  userTokensOf(userId: number): string[] {
    return [...this.#issuedUserTokens].filter(([, id]) => id === userId).map(([token]) => token);
  }
  /** Every user token and refresh token ever issued, used or not (userTokensOf). */
  readonly #issuedUserTokens = new Map<string, number>();

  /**
   * Ends a user's access tokens, as 8 hours do at GitHub (offsetMs would also end the app's
   * JWTs, which Octokit signs with the real clock).
   */
  expireUserTokens(userId: number): void {
    for (const t of this.#userTokens.values()) if (t.userId === userId) t.expiresAt = this.now();
  }

  /** Revokes a user's refresh tokens, as removing the app's authorization on GitHub does. */
  revokeRefreshTokens(userId: number): void {
    for (const [t, r] of this.#refreshTokens) if (r.userId === userId) this.#refreshTokens.delete(t);
  }

  /** Every installation token issued. */
  get installationTokens(): string[] {
    return [...this.#tokens.keys()];
  }

  /** GitHub's verdict on a token used for Git over HTTPS against `owner/name`. */
  gitAccess(token: string, fullName: string, write: boolean): "ok" | "unauthorized" | "forbidden" {
    const t = this.#tokens.get(token);
    if (!t || t.expiresAt <= this.now()) return "unauthorized";
    const inst = this.installations.get(t.installationId);
    if (!inst || inst.removed || inst.suspended) return "unauthorized";
    if (!t.repos.some((r) => r.toLowerCase() === fullName.toLowerCase())) return "forbidden";
    const level = t.permissions.contents;
    if (write ? level !== "write" : level !== "read" && level !== "write") return "forbidden";
    return "ok";
  }

  /** What GitHub's authorize page does for `browserUser` after they approve: the redirect back. */
  authorize(authorizeUrl: string, user: StandInUser | null = this.browserUser): string {
    const q = new URL(authorizeUrl).searchParams;
    if (!user) throw new Error("no GitHub user signed in to the stand-in's browser");
    if (q.get("client_id") !== this.clientId) throw new Error("unknown client_id");
    const method = q.get("code_challenge_method");
    if (q.get("code_challenge") && method !== "S256") throw new Error("only S256 is supported");
    const code = randomBytes(10).toString("hex");
    const redirectUri = q.get("redirect_uri")!;
    this.#codes.set(code, {
      userId: user.id,
      redirectUri,
      challenge: q.get("code_challenge"),
      used: false,
      expiresAt: this.now() + 10 * 60_000,
    });
    const back = new URL(redirectUri);
    back.searchParams.set("code", code);
    back.searchParams.set("state", q.get("state") ?? "");
    return back.toString();
  }

  /** A webhook delivery as GitHub sends it: headers (signature over the exact body) and body. */
  delivery(event: string, payload: unknown, id = randomBytes(16).toString("hex")) {
    const body = JSON.stringify(payload);
    return {
      body,
      headers: {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": id,
        "x-github-hook-installation-target-id": String(this.appId),
        "x-hub-signature-256": `sha256=${createHmac("sha256", this.webhookSecret).update(body).digest("hex")}`,
      },
    };
  }

  /** The `installation` object webhook payloads and GET /app/installations/{id} carry. */
  installationJson(inst: StandInInstallation): Installation {
    return {
      id: inst.id,
      account: simpleUser(inst.account),
      target_type: "User",
      target_id: inst.account.id,
      repository_selection: inst.selection,
      permissions: { ...APP_PERMISSIONS },
      events: [],
      suspended_at: inst.suspended ? new Date(this.now()).toISOString() : null,
      app_id: this.appId,
      app_slug: this.appSlug,
    };
  }

  repoJson(r: Repository): Repository {
    return r;
  }

  #repo(account: StandInUser, name: string): Repository {
    return {
      id: this.#nextId++,
      name,
      full_name: `${account.login}/${name}`,
      private: true,
      owner: simpleUser(account),
    };
  }

  // ---- HTTP ----------------------------------------------------------------------------

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", this.url);
    const body = await readBody(req);
    const p = url.pathname;

    if (req.method === "GET" && p === "/login/oauth/authorize") {
      res.writeHead(302, { location: this.authorize(url.toString()) }).end();
      return;
    }
    if (req.method === "POST" && p === "/login/oauth/access_token") return this.#exchange(req, res, body);
    if (req.method === "GET" && /^\/apps\/[^/]+\/installations\/new$/.test(p)) {
      return this.#installPage(res, url);
    }

    const tokens = /^\/api\/v3\/app\/installations\/(\d+)\/access_tokens$/.exec(p);
    if (tokens && req.method === "POST") {
      if (!this.#appJwt(req, res)) return;
      return this.#accessToken(res, Number(tokens[1]), body);
    }
    const m = /^\/api\/v3\/app\/installations\/(\d+)$/.exec(p);
    if (m && req.method === "GET") {
      if (!this.#appJwt(req, res)) return;
      const inst = this.installations.get(Number(m[1]));
      if (!inst || inst.removed) return notFound(res);
      return json(res, 200, this.installationJson(inst));
    }
    if (p === "/api/v3/installation/repositories" && req.method === "GET") {
      const t = this.#tokens.get(bearer(req) ?? "");
      if (!t || t.expiresAt <= this.now()) return badCredentials(res);
      const inst = this.installations.get(t.installationId)!;
      const repos = inst.repos.filter((r) => t.repos.includes(r.full_name));
      return json(res, 200, {
        total_count: repos.length,
        repository_selection: inst.selection,
        repositories: repos,
      } satisfies Pick<S["installation"], "repository_selection"> & {
        total_count: number;
        repositories: Repository[];
      });
    }

    const held = this.#userTokens.get(bearer(req) ?? "");
    const user = held && held.expiresAt > this.now() ? this.users.get(held.userId) : undefined;
    if (p.startsWith("/api/v3/user") && !user) return badCredentials(res);
    if (user && req.method === "GET" && p === "/api/v3/user") {
      const out: PrivateUser = {
        login: user.login,
        id: user.id,
        name: user.name,
        email: user.emails.find((e) => e.primary && e.visibility === "public")?.email ?? null,
        type: "User",
        site_admin: false,
      };
      return json(res, 200, out);
    }
    if (user && req.method === "GET" && p === "/api/v3/user/emails") {
      return json(res, 200, user.emails satisfies Email[]);
    }
    if (user && req.method === "GET" && p === "/api/v3/user/installations") {
      // The app's installations this user can reach: here, those on their own account.
      const mine = [...this.installations.values()].filter((i) => !i.removed && i.account.id === user.id);
      return json(res, 200, {
        total_count: mine.length,
        installations: mine.map((i) => this.installationJson(i)),
      });
    }
    notFound(res);
  }

  /** GitHub checks: RS256 signature with the app's key, `iss` the app id, unexpired, at most 10 minutes. */
  #appJwt(req: IncomingMessage, res: ServerResponse): boolean {
    const jwt = bearer(req) ?? "";
    const [h, p, sig] = jwt.split(".");
    const refuse = (message: string) => {
      json(res, 401, { message, documentation_url: "https://docs.github.com/rest", status: "401" });
      return false;
    };
    if (!h || !p || !sig) return refuse("A JSON web token could not be decoded");
    const header = JSON.parse(Buffer.from(h, "base64url").toString()) as { alg?: string };
    if (header.alg !== "RS256") return refuse("'alg' must be RS256");
    if (!verify("RSA-SHA256", Buffer.from(`${h}.${p}`), this.#publicKey, Buffer.from(sig, "base64url"))) {
      return refuse("A JSON web token could not be decoded");
    }
    const claims = JSON.parse(Buffer.from(p, "base64url").toString()) as {
      iat: number;
      exp: number;
      iss: string | number;
    };
    this.jwts.push({ iat: claims.iat, exp: claims.exp, iss: String(claims.iss) });
    const now = Math.floor(this.now() / 1000);
    if (String(claims.iss) !== String(this.appId)) return refuse("'Issuer' claim ('iss') must be the app id");
    if (claims.exp - claims.iat > 600)
      return refuse("'Expiration time' claim ('exp') is too far in the future");
    if (claims.exp <= now)
      return refuse("'Expiration time' claim ('exp') must be a numeric value representing the future time");
    if (claims.iat > now + 60)
      return refuse(
        "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued",
      );
    return true;
  }

  #accessToken(res: ServerResponse, installationId: number, raw: string) {
    const inst = this.installations.get(installationId);
    if (!inst || inst.removed) return notFound(res);
    if (inst.suspended)
      return json(res, 403, { message: "This installation has been suspended", status: "403" });
    const body = (raw ? JSON.parse(raw) : {}) as {
      repositories?: string[];
      permissions?: Record<string, string>;
    };
    this.tokenRequests.push({
      installationId,
      repositories: body.repositories,
      permissions: body.permissions,
    });
    const wanted = body.repositories ?? inst.repos.map((r) => r.name);
    const repos = wanted.map((name) => inst.repos.find((r) => r.name === name));
    if (repos.some((r) => !r)) {
      return json(res, 422, {
        message:
          "There is at least one repository that does not exist or is not accessible to the parent installation.",
        status: "422",
      });
    }
    const permissions = body.permissions ?? { ...APP_PERMISSIONS };
    for (const [key, level] of Object.entries(permissions)) {
      const granted = APP_PERMISSIONS[key as keyof typeof APP_PERMISSIONS] as string | undefined;
      if (!granted || (level === "write" && granted !== "write")) {
        return json(res, 422, {
          message: `The permissions requested are not granted to this installation.`,
          status: "422",
        });
      }
    }
    const token = `ghs_${randomBytes(18).toString("base64url")}`;
    const expiresAt = this.now() + 3_600_000;
    this.#tokens.set(token, {
      installationId,
      repos: repos.map((r) => r!.full_name),
      permissions,
      expiresAt,
    });
    const out: InstallationToken = {
      token,
      expires_at: new Date(expiresAt).toISOString().replace(/\.\d{3}Z$/, "Z"),
      permissions: permissions as InstallationToken["permissions"],
      repository_selection: "selected",
      repositories: repos.map((r) => r!),
    };
    json(res, 201, out);
  }

  #exchange(req: IncomingMessage, res: ServerResponse, raw: string) {
    const type = req.headers["content-type"] ?? "";
    const params: Record<string, string> = type.includes("json")
      ? (JSON.parse(raw || "{}") as Record<string, string>)
      : Object.fromEntries(new URLSearchParams(raw));
    // GitHub answers these refusals with 200 and an `error` field.
    const fail = (error: string, description: string) =>
      json(res, 200, { error, error_description: description, error_uri: "https://docs.github.com/apps" });
    if (params.client_id !== this.clientId || params.client_secret !== this.clientSecret) {
      return fail("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.");
    }
    if (params.grant_type === "refresh_token") {
      // One use: the refresh token and the user token it came with stop working, a new pair comes.
      const held = this.#refreshTokens.get(params.refresh_token ?? "");
      this.#refreshTokens.delete(params.refresh_token ?? "");
      if (!held || held.expiresAt <= this.now()) {
        this.refreshes.push({ ok: false, error: "bad_refresh_token" });
        return fail("bad_refresh_token", "The refresh token passed is incorrect or expired.");
      }
      this.#userTokens.delete(held.access);
      this.refreshes.push({ ok: true });
      return json(res, 200, this.#issueUserToken(held.userId));
    }
    const code = this.#codes.get(params.code ?? "");
    if (!code || code.used || code.expiresAt <= this.now()) {
      if (code) code.used = true;
      return fail("bad_verification_code", "The code passed is incorrect or expired.");
    }
    code.used = true;
    if (params.redirect_uri && params.redirect_uri !== code.redirectUri) {
      return fail(
        "redirect_uri_mismatch",
        "The redirect_uri MUST match the registered callback URL for this application.",
      );
    }
    if (code.challenge) {
      const got = createHash("sha256")
        .update(params.code_verifier ?? "")
        .digest("base64url");
      if (got !== code.challenge)
        return fail("invalid_grant", "The code_verifier does not match the code_challenge.");
    }
    json(res, 200, this.#issueUserToken(code.userId));
  }

  /** An expiring user token and its refresh token, as GitHub issues them (8 hours, 6 months). */
  #issueUserToken(userId: number) {
    const token = `ghu_${randomBytes(18).toString("base64url")}`;
    const refresh = `ghr_${randomBytes(30).toString("base64url")}`;
    this.#userTokens.set(token, { userId, expiresAt: this.now() + 28800 * 1000 });
    this.#refreshTokens.set(refresh, { userId, expiresAt: this.now() + 15897600 * 1000, access: token });
    this.#issuedUserTokens.set(token, userId).set(refresh, userId);
    return {
      access_token: token,
      expires_in: 28800,
      refresh_token: refresh,
      refresh_token_expires_in: 15897600,
      scope: "",
      token_type: "bearer",
    };
  }

  /** The install page, approved at once by `browserUser` on their own account with all their repos. */
  #installPage(res: ServerResponse, url: URL) {
    const user = this.browserUser;
    if (!user) return notFound(res);
    const inst = this.install(user, ["demo"]);
    const back = new URL(this.setupUrl);
    back.searchParams.set("installation_id", String(inst.id));
    back.searchParams.set("setup_action", "install");
    const state = url.searchParams.get("state");
    if (state) back.searchParams.set("state", state);
    res.writeHead(302, { location: back.toString() }).end();
  }
}

function simpleUser(u: StandInUser): SimpleUser {
  return { login: u.login, id: u.id, type: "User", site_admin: false };
}

function bearer(req: IncomingMessage): string | null {
  const m = /^(?:Bearer|token)\s+(\S+)$/i.exec(req.headers.authorization ?? "");
  return m ? m[1]! : null;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8" }).end(JSON.stringify(body));
}
const notFound = (res: ServerResponse) =>
  json(res, 404, { message: "Not Found", documentation_url: "https://docs.github.com/rest", status: "404" });
const badCredentials = (res: ServerResponse) =>
  json(res, 401, {
    message: "Bad credentials",
    documentation_url: "https://docs.github.com/rest",
    status: "401",
  });

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

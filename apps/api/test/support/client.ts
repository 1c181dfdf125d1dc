/** A tiny HTTP client for tests: JSON in, status + JSON out, cookies kept per instance. */
export class TestClient {
  private cookie: string | null = null;

  constructor(
    readonly baseUrl: string,
    private bearer: string | null = null,
  ) {}

  /** The `doppio_session=…` cookie this client holds, if signed in. */
  get sessionCookie(): string | null {
    return this.cookie;
  }

  /** The bearer token this client sends, if any. */
  get bearerToken(): string | null {
    return this.bearer;
  }

  /** The same credentials (cookie or bearer) against another replica of the control plane. */
  at(baseUrl: string): TestClient {
    const other = new TestClient(baseUrl, this.bearer);
    other.cookie = this.cookie;
    return other;
  }

  withBearer(token: string): TestClient {
    return new TestClient(this.baseUrl, token);
  }

  async request<T = any>(
    method: string,
    path: string,
    body?: unknown,
    init: { headers?: Record<string, string>; rawBody?: string } = {},
  ): Promise<{ status: number; body: T; headers: Headers }> {
    const headers: Record<string, string> = { ...init.headers };
    // Like the dashboard: every state change is JSON (`{}` when there is nothing to say) from
    // the control plane's own origin, which the API wants of cookie-authenticated callers.
    if (method !== "GET" && method !== "HEAD") {
      if (body === undefined && init.rawBody === undefined) body = {};
      headers.origin ??= new URL(this.baseUrl).origin;
    }
    if (body !== undefined || init.rawBody !== undefined) headers["content-type"] ??= "application/json";
    if (this.cookie) headers.cookie = this.cookie;
    if (this.bearer) headers.authorization = `Bearer ${this.bearer}`;
    const send = () =>
      fetch(new URL(path, this.baseUrl), {
        method,
        headers,
        // Redirects are asserted, never followed (they point at box hosts that do not resolve).
        redirect: "manual",
        body: init.rawBody ?? (body === undefined ? undefined : JSON.stringify(body)),
      });
    // A kept-alive connection the server closed as it was reused (a test that blocked the event
    // loop with synchronous ssh can line the two timers up) fails before any answer; the
    // request is sent again once, on a fresh connection. Tests only: a real client would not
    // resend a POST blindly.
    const res = await send().catch((err: unknown) => {
      if ((err as { cause?: { code?: string } }).cause?.code !== "ECONNRESET") throw err;
      return send();
    });
    const setCookie = res.headers.getSetCookie();
    for (const c of setCookie) {
      const [pair] = c.split(";");
      if (pair?.startsWith("doppio_session=")) this.cookie = pair.endsWith("=") ? null : pair;
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // non-JSON bodies (metrics) stay text
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  /** The raw response, body unread (server-sent event streams). */
  open(path: string, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
    const h: Record<string, string> = { ...headers };
    if (this.cookie) h.cookie = this.cookie;
    if (this.bearer) h.authorization = `Bearer ${this.bearer}`;
    return fetch(new URL(path, this.baseUrl), { headers: h, signal });
  }

  get = <T = any>(path: string) => this.request<T>("GET", path);
  post = <T = any>(path: string, body?: unknown) => this.request<T>("POST", path, body);
  del = <T = any>(path: string) => this.request<T>("DELETE", path);
}

let counter = 0;
export const uniqueEmail = (tag = "user") => `${tag}-${process.pid}-${Date.now()}-${counter++}@example.com`;
export const PASSWORD = "correct horse battery staple";

/** Signs up a fresh (ordinary) user and returns a client holding its session. */
export async function signedInClient(baseUrl: string, tag?: string): Promise<TestClient> {
  const client = new TestClient(baseUrl);
  const res = await client.post("/api/v1/auth/signup", { email: uniqueEmail(tag), password: PASSWORD });
  if (res.status !== 201) throw new Error(`signup failed: ${res.status} ${JSON.stringify(res.body)}`);
  return client;
}

/** Registers an active server as `admin` (see TestControlPlane.admin) and returns its agent client. */
export async function registerServer(
  admin: TestClient,
  name: string,
  extra: Record<string, unknown> = {},
): Promise<TestClient> {
  const res = await admin.post("/api/v1/servers", {
    name,
    domain: `${name}.example.test`,
    backend: "qemu",
    capacity: { vcpu: 16, memoryMb: 65536, diskGb: 500 },
    ...extra,
  });
  if (res.status !== 201) throw new Error(`register failed: ${res.status} ${JSON.stringify(res.body)}`);
  return new TestClient(admin.baseUrl, res.body.agentToken);
}

export function heartbeat(golden: Record<string, "ready" | "missing"> = { minimal: "ready" }, extra = {}) {
  return {
    version: "test",
    backend: "qemu",
    capacity: { vcpu: 16, memoryMb: 65536, diskGb: 500 },
    vms: [],
    golden: Object.fromEntries(Object.entries(golden).map(([t, status]) => [t, { status, version: "1" }])),
    ...extra,
  };
}

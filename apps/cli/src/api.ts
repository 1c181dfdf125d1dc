import type { BoxWithJob, CreateBoxRequest, ErrorCode, LogsQuery } from "@doppio/contracts";
import { routes } from "@doppio/contracts";
import { DoppioClient, NetworkError, ApiError as SdkApiError, UnexpectedAnswerError } from "@doppio/sdk";
import { CliError, type CliErrorKind } from "./errors.ts";

const REQUEST_TIMEOUT_MS = 30_000;

export type { BoxWithJob };

/** Errors the user caused map to usage (2); everything else the server refused is a failure (1). */
const KIND_BY_CODE: Partial<Record<ErrorCode, CliErrorKind>> = {
  bad_request: "usage",
  validation_failed: "usage",
};

const HINT_BY_CODE: Partial<Record<ErrorCode, string>> = {
  unauthorized: "sign in with: doppio login",
  forbidden: "this account may not do that",
  not_found: "list your boxes with: doppio ls",
  conflict: "check the box with: doppio status NAME",
  rate_limited: "wait a minute and try again",
  validation_failed: "check the arguments against --help",
  no_capacity: "try again later or pick a smaller --size",
  payment_required: "see doppio wallet; top up in the dashboard's Billing page or ask an administrator",
};

export class ApiError extends CliError {
  constructor(
    readonly status: number,
    readonly code: ErrorCode | null,
    message: string,
    hint?: string,
    kind: CliErrorKind = "failed",
  ) {
    super(kind, message, hint);
  }
}

/**
 * The CLI's view of the control plane: the typed SDK (packages/sdk), with every failure
 * turned into a CliError (its exit code, message and hint).
 */
export class ApiClient {
  readonly sdk: DoppioClient;

  constructor(
    readonly baseUrl: string,
    token?: string,
  ) {
    this.sdk = new DoppioClient({ baseUrl, token, timeoutMs: REQUEST_TIMEOUT_MS });
  }

  withToken(token: string): ApiClient {
    return new ApiClient(this.baseUrl, token);
  }

  /** Runs SDK calls, reporting their failures as CliErrors. */
  async run<T>(call: (sdk: DoppioClient) => Promise<T>): Promise<T> {
    try {
      return await call(this.sdk);
    } catch (err) {
      throw toCliError(this.baseUrl, err);
    }
  }

  me = () => this.run((c) => c.me());
  templates = () => this.run((c) => c.templates());
  boxes = () => this.run((c) => c.boxes());
  box = (slug: string) => this.run((c) => c.box(slug));
  jobs = (slug: string) => this.run((c) => c.jobs(slug));
  createBox = (req: CreateBoxRequest) => this.run((c) => c.createBox(req));
  github = () => this.run((c) => c.github());
  githubRepos = () => this.run((c) => c.githubRepos());
  connectGitHub = () => this.run((c) => c.connectGitHub());
  action = (slug: string, action: "start" | "stop" | "reset" | "hibernate") =>
    forBox(
      slug,
      this.run((c) => c[`${action}Box`](slug)),
    );
  deleteBox = (slug: string) =>
    forBox(
      slug,
      this.run((c) => c.deleteBox(slug)),
    );
  keepAwake = (slug: string) =>
    forBox(
      slug,
      this.run((c) => c.keepBoxAwake(slug)),
    );
  setBoxIdle = (slug: string, idleTimeoutMinutes: number | null, publicWake?: boolean) =>
    forBox(
      slug,
      this.run((c) =>
        c.setBoxIdle(
          slug,
          publicWake === undefined ? { idleTimeoutMinutes } : { idleTimeoutMinutes, publicWake },
        ),
      ),
    );
  setIdleDefault = (idleTimeoutMinutes: number | null) =>
    this.run((c) => c.setIdleDefault(idleTimeoutMinutes));
  logs = (slug: string, query: LogsRequest) => this.run((c) => c.logs(slug, query));
  tokens = () => this.run((c) => c.tokens());
  revokeToken = (id: string) => this.run((c) => c.revokeToken(id));
  wallet = () => this.run((c) => c.request("getWallet", {}));
  invoices = () => this.run(async (c) => (await c.request("listInvoices", {})).invoices);

  /**
   * Exchanges email and password for a personal API token. The session the login opens
   * lives only for this exchange and is closed right after; the password is never stored.
   */
  loginForToken = (email: string, password: string, tokenName: string) =>
    this.run(async (sdk) => {
      const login = await sdk.send("login", { body: { email, password } });
      const me = routes.login.responses[200].parse(await login.json());
      const cookie = login.headers
        .getSetCookie()
        .map((c) => c.split(";")[0]!)
        .find((c) => c.startsWith("doppio_session="));
      if (!cookie) throw new CliError("failed", "the server did not open a session", "try --token instead");
      // The API refuses cookie-authenticated changes a browser page on another origin could
      // have sent; this is no browser, and it says where it stands the way browsers do
      // (pages can never set Sec-Fetch-* themselves). Bodies are JSON, `{}` when empty.
      const session = new DoppioClient({
        baseUrl: this.baseUrl,
        timeoutMs: REQUEST_TIMEOUT_MS,
        headers: { cookie, "sec-fetch-site": "same-origin" },
      });
      try {
        return { me, token: await session.createToken({ name: tokenName }) };
      } finally {
        await session.request("logout", {}).catch(() => {});
      }
    });
}

/** What `doppio logs` asks for; the server applies the same defaults and limits. */
export type LogsRequest = Partial<LogsQuery>;

/** Puts the box's name into hints like "doppio status NAME". */
async function forBox<T>(slug: string, request: Promise<T>): Promise<T> {
  try {
    return await request;
  } catch (err) {
    if (err instanceof ApiError && err.hint?.includes("NAME")) {
      throw new ApiError(err.status, err.code, err.message, err.hint.replace("NAME", slug), err.kind);
    }
    throw err;
  }
}

function unreachable(baseUrl: string, cause: unknown): CliError {
  const reason = describeNetworkError(cause);
  return new CliError(
    "unreachable",
    `cannot reach the control plane at ${baseUrl}${reason ? ` (${reason})` : ""}`,
    "check the URL (doppio context ls) and your network",
    { cause },
  );
}

function describeNetworkError(err: unknown): string {
  for (let e: unknown = err; e && typeof e === "object"; e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    if ((e as { name?: unknown }).name === "TimeoutError") return "timed out";
  }
  return "";
}

/** The CLI's error for anything an SDK call threw (CliErrors and the caller's aborts pass as they are). */
export function toCliError(baseUrl: string, err: unknown): unknown {
  if (err instanceof NetworkError) return unreachable(baseUrl, err.cause);
  if (err instanceof UnexpectedAnswerError) {
    return new CliError(
      "failed",
      `unexpected answer from ${baseUrl} (${err.method} ${err.path.replace(/^\/api\/v1/, "")})`,
      "is this a doppiobox control plane, and are the CLI and server versions compatible?",
      { cause: err },
    );
  }
  if (!(err instanceof SdkApiError)) return err;
  if (!err.error) {
    // A proxy or load balancer answering instead of the control plane.
    if (err.status === 502 || err.status === 503 || err.status === 504) {
      return new CliError(
        "unreachable",
        `the control plane at ${baseUrl} is not answering (HTTP ${err.status})`,
        "try again in a moment",
      );
    }
    return new ApiError(
      err.status,
      null,
      `unexpected HTTP ${err.status} from ${baseUrl}`,
      "retry with --debug",
    );
  }
  const { code, message, details } = err.error;
  const field = (details as { field?: unknown } | undefined)?.field;
  const hint = field === "template" ? "list templates with: doppio templates" : HINT_BY_CODE[code];
  return new ApiError(err.status, code, message, hint, KIND_BY_CODE[code] ?? "failed");
}

import { hostname } from "node:os";
import type { Command } from "commander";
import { ApiClient, ApiError } from "../api.ts";
import type { App } from "../app.ts";
import { checkContextName, contextNameFor, normalizeUrl } from "../config.ts";
import { CliError, usageError } from "../errors.ts";
import { examples, printJson, printKeyValues } from "../output.ts";

interface LoginOptions {
  url?: string;
  email?: string;
  token?: string;
  passwordStdin?: boolean;
  name?: string;
}

export function registerAuthCommands(program: Command, app: App): void {
  program
    .command("login")
    .description("sign in and store a personal API token (never the password)")
    .option("--url <url>", "control plane URL (default: the current context's)")
    .option("--name <context>", "context to store the token in (default: the URL's host)")
    .option("--email <email>", "account email (asked for on a terminal when omitted)")
    .option("--password-stdin", "read the password from standard input")
    .option("--token <token>", "use an existing personal API token (dpb_…) instead of a password")
    .addHelpText(
      "after",
      `
Examples:
  doppio login --url https://boxes.example.com
  echo "$PASSWORD" | doppio login --url https://boxes.example.com --email me@example.com --password-stdin
  doppio login --url https://boxes.example.com --token dpb_...`,
    )
    .action((opts: LoginOptions) => login(app, opts));

  program
    .command("logout")
    .description("revoke the stored token on the server and forget it here")
    .addHelpText("after", examples("doppio logout", "doppio --context staging logout"))
    .action(() => logout(app));

  program
    .command("whoami")
    .description("show the signed-in account and the control plane in use")
    .option("--json", "print JSON")
    .addHelpText("after", examples("doppio whoami", "doppio whoami --json | jq -r .email"))
    .action(async (opts: { json?: boolean }) => {
      const target = await app.target();
      const me = await (await app.api()).me();
      if (opts.json) return printJson(app.io.stdout, { ...me, url: target.url, context: target.contextName });
      printKeyValues(app.io.stdout, [
        ["email", me.email],
        ["verified", me.emailVerified ? "yes" : "no (no trial credit yet: doppio verify-email resend)"],
        ["role", me.role],
        ["team", me.team.name],
        ["context", target.contextName ?? "(from environment)"],
        ["url", target.url],
      ]);
    });
}

async function login(app: App, opts: LoginOptions): Promise<void> {
  const { io } = app;
  const config = await app.config();
  const selected = app.globals().context ?? config.current;
  const url = normalizeUrl(
    opts.url ??
      io.settings.url ??
      (selected ? config.contexts[selected]?.url : undefined) ??
      fail(usageError("no control plane URL", "pass --url https://boxes.example.com")),
  );
  const sameUrl = Object.entries(config.contexts).find(([, c]) => c.url === url)?.[0];
  const name = checkContextName(opts.name ?? app.globals().context ?? sameUrl ?? contextNameFor(url));
  const anonymous = new ApiClient(url);

  let token: string;
  let tokenId: string | undefined;
  let email: string;
  if (opts.token) {
    if (opts.email || opts.passwordStdin)
      throw usageError("--token cannot be combined with --email or --password-stdin");
    token = opts.token.trim();
    const client = anonymous.withToken(token);
    const me = await client
      .me()
      .catch(rethrowAuth("the token was not accepted", "create a new one in the dashboard"));
    email = me.email;
    const matches = (await client.tokens()).filter((t) => token.startsWith(t.prefix));
    tokenId = matches.length === 1 ? matches[0]!.id : undefined;
  } else {
    email = opts.email ?? (await ask(app, "Email: ", false, "--email"));
    const password = opts.passwordStdin
      ? (await io.readStdin()).replace(/\r?\n$/, "")
      : await ask(app, "Password: ", true, "--password-stdin");
    if (!password) throw usageError("empty password");
    const created = await anonymous
      .loginForToken(email, password, `doppio CLI on ${hostname()}`)
      .catch(rethrowAuth("wrong email or password", "check them, or sign in with --token"));
    token = created.token.token;
    tokenId = created.token.id;
    email = created.me.email;
  }

  const previous = config.contexts[name];
  if (previous?.token && previous.token !== token && previous.url === url) {
    // Best effort: a token replaced by a new login should not stay valid.
    await revoke(new ApiClient(url, previous.token), previous.token, previous.tokenId).catch(() => {});
  }
  config.contexts[name] = { url, token, tokenId, email };
  config.current = name;
  await app.saveConfig(config);
  io.stdout.write(`Signed in to ${url} as ${email} (context "${name}").\n`);
}

async function logout(app: App): Promise<void> {
  const { io } = app;
  if (io.settings.token) {
    throw usageError(
      "DOPPIO_TOKEN is set in the environment; logout only revokes stored tokens",
      "unset DOPPIO_TOKEN, or revoke that token in the dashboard",
    );
  }
  const config = await app.config();
  const name = app.globals().context ?? config.current;
  const ctx = name ? config.contexts[name] : undefined;
  if (!name || !ctx?.token) {
    io.stdout.write("Not signed in.\n");
    return;
  }
  try {
    await revoke(new ApiClient(ctx.url, ctx.token), ctx.token, ctx.tokenId);
  } catch (err) {
    // 401: the token was already revoked elsewhere; the goal is reached.
    if (!(err instanceof ApiError && err.status === 401)) {
      const reason = err instanceof Error ? err.message : String(err);
      io.stderr.write(
        `doppio: warning: could not revoke the token on the server (${reason}); revoke it in the dashboard\n`,
      );
    }
  }
  config.contexts[name] = { url: ctx.url };
  await app.saveConfig(config);
  io.stdout.write(`Signed out of ${ctx.url} (context "${name}").\n`);
}

/** Revokes `token` on its server, finding its id by prefix when it was not stored. */
export async function revoke(api: ApiClient, token: string, tokenId?: string): Promise<void> {
  let id = tokenId;
  if (!id) {
    const matches = (await api.tokens()).filter((t) => token.startsWith(t.prefix));
    if (matches.length !== 1) throw new CliError("failed", "cannot tell which server token this is");
    id = matches[0]!.id;
  }
  await api.revokeToken(id);
}

async function ask(app: App, question: string, silent: boolean, flag: string): Promise<string> {
  if (!app.io.stdinIsTTY) {
    throw usageError(`no terminal to ask for ${silent ? "the password" : "the email"}`, `pass ${flag}`);
  }
  return (await app.io.prompt(question, { silent })).trim();
}

function rethrowAuth(message: string, hint: string) {
  return (err: unknown): never => {
    if (err instanceof ApiError && err.status === 401) {
      throw new CliError("failed", message, hint, { cause: err });
    }
    throw err;
  };
}

function fail(err: Error): never {
  throw err;
}

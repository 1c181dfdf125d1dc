import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import path from "node:path";
import { promisify } from "node:util";

const exec = promisify(execFile);

/** Debian's git ships the real smart-HTTP server as a CGI program. */
const GIT_HTTP_BACKEND = "/usr/lib/git-core/git-http-backend";
export const hasGitHttpBackend = existsSync(GIT_HTTP_BACKEND);

/** Decides whether a token may read (or, with `write`, push to) `owner/name`. */
export type TokenCheck = (
  token: string,
  fullName: string,
  write: boolean,
) => "ok" | "unauthorized" | "forbidden";

/**
 * A Git smart-HTTP server on loopback, as GitHub's would behave for an installation token:
 * `https://x-access-token:TOKEN@host/owner/name.git`. No credential: 401 with a Basic
 * challenge (so git asks its credential helper); a token that is unknown, expired or revoked:
 * 401; a valid token for another repository: 403. Accepted requests go to git-http-backend.
 */
export class GitHttpServer {
  readonly requests: Array<{ repo: string; write: boolean; status: number }> = [];
  #server: Server | undefined;
  url = "";

  constructor(
    readonly root: string,
    private readonly check: TokenCheck,
  ) {}

  async start(): Promise<void> {
    this.#server = createServer((req, res) => {
      this.handle(req, res).catch((err) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(err));
      });
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, "127.0.0.1", resolve));
    const addr = this.#server.address();
    this.url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }

  /** A bare repository `owner/name.git` with one commit on `main` (holding `files`, if any). */
  async createRepo(fullName: string, files: Record<string, string> = {}): Promise<string> {
    const dir = path.join(this.root, `${fullName}.git`);
    await mkdir(path.dirname(dir), { recursive: true });
    await exec("git", ["init", "--bare", "--initial-branch=main", dir]);
    const work = `${dir}-seed`;
    await exec("git", ["init", "--initial-branch=main", work]);
    for (const [name, text] of Object.entries(files)) await writeFile(path.join(work, name), text);
    await exec("git", ["-C", work, "add", "-A"]);
    const id = ["-c", "user.name=seed", "-c", "user.email=seed@example.invalid"];
    await exec("git", [...id, "-C", work, "commit", "--allow-empty", "-m", "seed"]);
    await exec("git", ["-C", work, "push", dir, "main"]);
    return dir;
  }

  /** The commits on `main` of a repository here, newest first, as `format` (git log's; default the subject). */
  async log(fullName: string, format = "%s"): Promise<string[]> {
    const { stdout } = await exec("git", [
      "--git-dir",
      path.join(this.root, `${fullName}.git`),
      "log",
      `--format=${format}`,
      "main",
    ]);
    return stdout.trim().split("\n");
  }

  /** One smart-HTTP request (also what the GitHub stand-in passes on for its web origin). */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const match = /^\/([A-Za-z0-9-]+)\/([A-Za-z0-9._-]+)\.git(\/.*)$/.exec(url.pathname);
    if (!match) {
      res.writeHead(404).end();
      return;
    }
    const fullName = `${match[1]}/${match[2]}`;
    const rest = match[3]!;
    const write = url.searchParams.get("service") === "git-receive-pack" || rest === "/git-receive-pack";
    const token = basicPassword(req.headers.authorization);
    const verdict = token === null ? "unauthorized" : this.check(token, fullName, write);
    if (verdict !== "ok") {
      const status = verdict === "unauthorized" ? 401 : 403;
      this.requests.push({ repo: fullName, write, status });
      req.resume();
      const headers: Record<string, string> = { "content-type": "text/plain" };
      if (status === 401) headers["www-authenticate"] = 'Basic realm="GitHub"';
      res
        .writeHead(status, headers)
        .end(status === 401 ? "Invalid username or token.\n" : "Permission denied.\n");
      return;
    }
    this.requests.push({ repo: fullName, write, status: 200 });
    await this.#cgi(req, res, `/${fullName}.git${rest}`, url.search.slice(1));
  }

  #cgi(req: IncomingMessage, res: ServerResponse, pathInfo: string, query: string): Promise<void> {
    const env: Record<string, string> = {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      GIT_PROJECT_ROOT: this.root,
      GIT_HTTP_EXPORT_ALL: "1",
      // git-http-backend serves pushes only to an authenticated user.
      REMOTE_USER: "x-access-token",
      REQUEST_METHOD: req.method ?? "GET",
      PATH_INFO: pathInfo,
      QUERY_STRING: query,
      CONTENT_TYPE: req.headers["content-type"] ?? "",
    };
    if (req.headers["content-encoding"]) env.HTTP_CONTENT_ENCODING = String(req.headers["content-encoding"]);
    if (req.headers["git-protocol"]) env.GIT_PROTOCOL = String(req.headers["git-protocol"]);
    if (req.headers["content-length"]) env.CONTENT_LENGTH = String(req.headers["content-length"]);
    return new Promise((resolve, reject) => {
      const child = spawn(GIT_HTTP_BACKEND, [], { env, stdio: ["pipe", "pipe", "inherit"] });
      req.pipe(child.stdin);
      let head = Buffer.alloc(0);
      let headersDone = false;
      child.stdout.on("data", (chunk: Buffer) => {
        if (headersDone) {
          res.write(chunk);
          return;
        }
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        headersDone = true;
        let status = 200;
        const headers: Record<string, string> = {};
        for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
          const i = line.indexOf(":");
          const key = line.slice(0, i).trim().toLowerCase();
          const value = line.slice(i + 1).trim();
          if (key === "status") status = Number.parseInt(value, 10);
          else headers[key] = value;
        }
        res.writeHead(status, headers);
        res.write(head.subarray(end + 4));
      });
      child.on("error", reject);
      child.on("close", () => {
        res.end();
        resolve();
      });
    });
  }
}

function basicPassword(header: string | undefined): string | null {
  const match = /^Basic\s+([A-Za-z0-9+/=]+)$/i.exec(header ?? "");
  if (!match) return null;
  const decoded = Buffer.from(match[1]!, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon < 0 ? null : decoded.slice(colon + 1);
}

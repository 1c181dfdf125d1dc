import { failureText, type Job, STEP_LABELS } from "@doppio/contracts";
import type { Command } from "commander";
import type { App } from "../app.ts";
import { CliError, failed, usageError } from "../errors.ts";
import type { OutStream } from "../io.ts";
import { clockTime, examples, formatDuration, printJson, renderTable, shortId } from "../output.ts";
import { watchBoxJobs } from "../watch.ts";
import { parsePort, parseSlug } from "./box-args.ts";

export function registerInfoCommands(program: Command, app: App): void {
  program
    .command("jobs <name>")
    .description("list a box's jobs, newest first; --steps or -f shows each step")
    .option("--steps", "print each job's steps, outcome and agent log lines instead of a table")
    .option("-f, --follow", "print the steps, then follow new jobs and steps live (Ctrl-C to stop)")
    .option("--json", "print JSON (an array of jobs; not with --follow)")
    .addHelpText(
      "after",
      examples(
        "doppio jobs my-box",
        "doppio jobs my-box --steps",
        "doppio jobs my-box -f",
        "doppio jobs my-box --json | jq '.[0].status'",
      ),
    )
    .action(async (name: string, opts: { steps?: boolean; follow?: boolean; json?: boolean }) => {
      const slug = parseSlug(name);
      if (opts.json && opts.follow) throw usageError("--json cannot be combined with --follow");
      const api = await app.api();
      const jobs = await api.jobs(slug);
      if (opts.json) return printJson(app.io.stdout, jobs);
      if (!opts.steps && !opts.follow) {
        app.io.stdout.write(
          renderTable(
            ["ID", "ACTION", "STATUS", "CREATED", "DURATION", "ERROR"],
            jobs.map((j) => [
              shortId(j.id),
              j.action,
              j.status,
              j.createdAt.replace(/\.\d+Z$/, "Z"),
              j.startedAt && j.finishedAt
                ? formatDuration(Date.parse(j.finishedAt) - Date.parse(j.startedAt))
                : "-",
              failureText(j.error, j.errorCode) ?? "",
            ]),
          ),
        );
        return;
      }
      const printer = new StepPrinter(app.io.stdout);
      for (const job of [...jobs].reverse()) printer.show(job);
      if (!opts.follow) {
        if (jobs.length === 0) app.io.stdout.write(`Box ${slug} has no jobs yet.\n`);
        return;
      }
      const abort = new AbortController();
      let error: unknown = null;
      await app.io.onInterrupt(
        () => {
          error = new CliError("interrupted", "stopped following");
          abort.abort();
        },
        () =>
          watchBoxJobs(
            api,
            app.io,
            slug,
            {
              onJob(job) {
                printer.show(job);
                // Nothing more will happen to a deleted box.
                if (job.action === "delete" && job.status === "succeeded") abort.abort();
              },
              onPollError(err) {
                // Gone after a delete, or access lost: following makes no sense any more.
                if (err instanceof CliError && err.kind !== "unreachable") {
                  error = err;
                  abort.abort();
                }
              },
            },
            abort.signal,
          ),
      );
      if (error) throw error;
    });

  program
    .command("open <name>")
    .description("print a box's URL and open it in a browser when there is one")
    .option("--code", "the VS Code URL instead of the site")
    .option("--port <port>", "the URL of a dev server port inside the box")
    .option("--json", 'print JSON ({"url": ...}) and open nothing')
    .addHelpText(
      "after",
      `
A browser (xdg-open) is started only when DISPLAY or WAYLAND_DISPLAY is set and the
output is a terminal; otherwise the URL is just printed.

Examples:
  doppio open my-box
  doppio open my-box --code
  doppio open my-box --port 5173`,
    )
    .action(async (name: string, opts: { code?: boolean; port?: string; json?: boolean }) => {
      const slug = parseSlug(name);
      if (opts.code && opts.port) throw usageError("--code and --port exclude each other");
      const port = opts.port === undefined ? undefined : parsePort(opts.port);
      const box = await (await app.api()).box(slug);
      if (!box.urls)
        throw failed(`box ${slug} has no URLs yet (status: ${box.status})`, `doppio status ${slug}`);
      const url = port
        ? box.urls.devPort.replace("{port}", String(port))
        : opts.code
          ? box.urls.code
          : box.urls.site;
      if (opts.json) return printJson(app.io.stdout, { url });
      app.io.stdout.write(`${url}\n`);
      if (app.io.settings.hasDisplay && app.io.stdout.isTTY) await app.io.openBrowser(url);
    });

  program
    .command("templates")
    .description("list the templates boxes are created from")
    .option("--json", "print JSON (an array of templates)")
    .addHelpText("after", examples("doppio templates", "doppio create --template minimal"))
    .action(async (opts: { json?: boolean }) => {
      const templates = await (await app.api()).templates();
      if (opts.json) return printJson(app.io.stdout, templates);
      app.io.stdout.write(
        renderTable(
          ["NAME", "TITLE", "VERSION", "SIZE", "READY ON", "DESCRIPTION"],
          templates.map((t) => [
            t.name,
            t.title,
            t.version,
            t.defaultSize,
            `${t.readyOn.length} server${t.readyOn.length === 1 ? "" : "s"}`,
            t.description,
          ]),
        ),
      );
    });
}

/** Prints each job's header, steps and outcome once, however often the job is seen again. */
class StepPrinter {
  private printed = new Set<string>();

  constructor(private readonly out: OutStream) {}

  show(job: Job): void {
    this.once(`${job.id}`, `== ${job.action} job ${shortId(job.id)} · created ${job.createdAt}`);
    job.steps.forEach((step, i) => {
      const mark = step.status === "running" ? "▸" : step.status === "succeeded" ? "✓" : "✗";
      const at = Date.parse(step.finishedAt ?? step.startedAt);
      const took = step.finishedAt
        ? ` (${formatDuration(Date.parse(step.finishedAt) - Date.parse(step.startedAt))})`
        : "";
      const detail = step.detail ? `: ${step.detail}` : "";
      this.once(
        `${job.id}:${i}:${step.status}`,
        `${clockTime(at)}  ${mark} ${STEP_LABELS[step.name]}${took}${detail}`,
      );
    });
    job.log
      .split("\n")
      .filter(Boolean)
      .forEach((line, i) => {
        this.once(`${job.id}:log:${i}`, `   | ${line}`);
      });
    if (job.status === "succeeded" || job.status === "failed") {
      const reason = failureText(job.error, job.errorCode);
      const error = reason ? `: ${reason}` : "";
      this.once(`${job.id}:final`, `   ${job.status}${error}`);
    }
  }

  private once(key: string, line: string): void {
    if (this.printed.has(key)) return;
    this.printed.add(key);
    this.out.write(`${line}\n`);
  }
}

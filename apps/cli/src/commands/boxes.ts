import { type Box, failureText, type Job, repoNameProblem } from "@doppio/contracts";
import { type Command, Option } from "commander";
import type { ApiClient, BoxWithJob } from "../api.ts";
import type { App } from "../app.ts";
import { CliError, failed, usageError } from "../errors.ts";
import { examples, formatAge, formatIn, printJson, printKeyValues, renderTable, shortId } from "../output.ts";
import { waitForJob } from "../wait.ts";
import { collect, parseEnv, parseSize, parseSlug } from "./box-args.ts";

type Action = "start" | "stop" | "hibernate" | "reset" | "rm";

interface ActionOptions {
  wait: boolean;
  yes?: boolean;
  json?: boolean;
}

const ACTIONS: Record<Action, { describe: string; progress: string; done: string; confirm?: string }> = {
  start: {
    describe: "start a stopped box, or resume a hibernated one where it was",
    progress: "starting",
    done: "is running",
  },
  stop: {
    describe: "stop a running box (its disk is kept; a hibernated box's memory is not)",
    progress: "stopping",
    done: "is stopped",
  },
  hibernate: {
    describe: "hibernate a running box: its processes and memory are kept for the next start",
    progress: "hibernating",
    done: "is hibernated",
  },
  reset: {
    describe: "reset a box to its template (everything on its disk is lost)",
    progress: "resetting",
    done: "was reset and is running",
    confirm: "Reset box %s to its template? Everything on its disk is lost.",
  },
  rm: {
    describe: "delete a box and its disk",
    progress: "deleting",
    done: "was deleted",
    confirm: "Delete box %s and its disk? This cannot be undone.",
  },
};

export function registerBoxCommands(program: Command, app: App): void {
  program
    .command("ls")
    .description("list your boxes")
    .option("--json", "print JSON (an array of boxes)")
    .option("-q, --quiet", "print only box names")
    .addHelpText("after", "\nExamples:\n  doppio ls\n  doppio ls --json | jq -r '.[].urls.site'")
    .action(async (opts: { json?: boolean; quiet?: boolean }) => {
      const boxes = await (await app.api()).boxes();
      if (opts.json) return printJson(app.io.stdout, boxes);
      if (opts.quiet) {
        for (const b of boxes) app.io.stdout.write(`${b.slug}\n`);
        return;
      }
      if (boxes.length === 0) {
        app.io.stdout.write("No boxes yet. Create one with: doppio create --template minimal\n");
        return;
      }
      const now = app.io.now();
      app.io.stdout.write(
        renderTable(
          ["NAME", "STATUS", "HIBERNATES", "TEMPLATE", "SIZE", "CREATED", "SITE"],
          boxes.map((b) => [
            b.slug,
            b.status,
            b.idleHibernatesAt ? formatIn(b.idleHibernatesAt, now) : "-",
            b.template,
            b.size,
            formatAge(b.createdAt, now),
            b.urls?.site ?? "-",
          ]),
        ),
      );
    });

  program
    .command("create [name]")
    .description("create a box and wait until it runs")
    .option("-t, --template <template>", "template to create from (see: doppio templates)")
    .option("-s, --size <size>", "small, medium or large (default: the template's)")
    .option("-e, --env <NAME=value>", "environment variable for the box (repeatable)", collect)
    .option(
      "--repo <owner/name>",
      "a GitHub repository you connected: the box's git credentials are for it (see: doppio github repos)",
    )
    .option("--no-wait", "return as soon as the job is queued")
    .option("--json", "print JSON ({box, job})")
    .addHelpText(
      "after",
      `
Without a name the server picks a readable one (e.g. brisk-falcon-3f9a).

Examples:
  doppio create --template minimal
  doppio create my-app --template frappe --size large --env GIT_BRANCH=develop
  doppio create --template code --repo octo/my-app
  doppio create --template code --no-wait --json | jq -r .box.slug`,
    )
    .action(
      async (
        name: string | undefined,
        opts: {
          template?: string;
          size?: string;
          env?: string[];
          repo?: string;
          wait: boolean;
          json?: boolean;
        },
      ) => {
        const repoProblem = opts.repo === undefined ? null : repoNameProblem(opts.repo);
        if (repoProblem) throw usageError(`--repo: ${repoProblem}`, "list yours with: doppio github repos");
        const slug = name === undefined ? undefined : parseSlug(name);
        const size = opts.size === undefined ? undefined : parseSize(opts.size);
        const env = parseEnv(opts.env ?? []);
        if (!opts.template)
          throw usageError("--template is required", "list templates with: doppio templates");
        const api = await app.api();
        const created = await api.createBox({
          name: slug,
          template: opts.template,
          size,
          env: Object.keys(env).length > 0 ? env : undefined,
          repo: opts.repo,
        });
        await finishAction(app, api, created, "create", { wait: opts.wait, json: opts.json });
      },
    );

  for (const action of Object.keys(ACTIONS) as Action[]) {
    const spec = ACTIONS[action];
    const cmd = program
      .command(`${action} <name>`)
      .description(spec.describe)
      .option("--no-wait", "return as soon as the job is queued")
      .option("--json", "print JSON ({box, job})");
    if (spec.confirm) cmd.option("-y, --yes", "do not ask for confirmation (required without a terminal)");
    // Accepted everywhere so scripts can pass --yes to any action; start and stop never ask.
    else cmd.addOption(new Option("-y, --yes").hideHelp());
    cmd
      .addHelpText(
        "after",
        `\nExamples:\n  doppio ${action} my-box${spec.confirm ? `\n  doppio ${action} my-box --yes --no-wait` : `\n  doppio ${action} my-box --no-wait`}`,
      )
      .action(async (name: string, opts: ActionOptions) => {
        const slug = parseSlug(name);
        const api = await app.api();
        if (spec.confirm && !opts.yes) await confirm(app, api, slug, spec.confirm.replace("%s", slug));
        const res = action === "rm" ? await api.deleteBox(slug) : await api.action(slug, action);
        await finishAction(app, api, res, action, opts);
      });
  }

  program
    .command("status <name>")
    .description("show a box: state, URLs, size and its latest job")
    .option("--json", "print JSON (the box)")
    .addHelpText("after", examples("doppio status my-box", "doppio status my-box --json | jq -r .status"))
    .action(async (name: string, opts: { json?: boolean }) => {
      const slug = parseSlug(name);
      const api = await app.api();
      const box = await api.box(slug);
      if (opts.json) return printJson(app.io.stdout, box);
      const last = (await api.jobs(slug))[0];
      printBox(app, box, last);
    });
}

async function confirm(app: App, api: ApiClient, slug: string, question: string): Promise<void> {
  if (!app.io.stdinIsTTY) {
    throw usageError(
      `refusing to change box "${slug}" without confirmation`,
      "pass --yes to confirm from a script",
    );
  }
  await api.box(slug); // an unknown box fails before asking
  const answer = await app.io.prompt(`${question} [y/N] `);
  if (!/^y(es)?$/i.test(answer.trim())) throw failed("not confirmed; nothing was changed");
}

const TITLES = {
  create: "creating",
  start: "starting",
  stop: "stopping",
  hibernate: "hibernating",
  reset: "resetting",
  rm: "deleting",
};
const DONE: Record<Action | "create", string> = {
  create: "is running",
  start: ACTIONS.start.done,
  stop: ACTIONS.stop.done,
  hibernate: ACTIONS.hibernate.done,
  reset: ACTIONS.reset.done,
  rm: ACTIONS.rm.done,
};

async function finishAction(
  app: App,
  api: ApiClient,
  res: BoxWithJob,
  action: Action | "create",
  opts: { wait: boolean; json?: boolean },
): Promise<void> {
  const { io } = app;
  const slug = res.box.slug;
  if (!opts.wait) {
    if (opts.json) return printJson(io.stdout, res);
    io.stdout.write(
      `${TITLES[action][0]!.toUpperCase()}${TITLES[action].slice(1)} box ${slug} (job ${shortId(res.job.id)}, ${res.job.status}).\n` +
        `Follow it with: doppio jobs ${slug} -f\n`,
    );
    return;
  }
  const job = await waitForJob(api, io, { slug, job: res.job, title: `${TITLES[action]} ${slug}` });
  if (job.status === "failed") {
    throw new CliError(
      "failed",
      `${action === "rm" ? "delete" : action} of box ${slug} failed: ${failureText(job.error, job.errorCode) ?? "no reason given"}`,
      `see its steps with: doppio jobs ${slug} --steps`,
    );
  }
  const box = action === "rm" ? null : await api.box(slug).catch(() => null);
  if (opts.json) return printJson(io.stdout, { box: box ?? { ...res.box, status: "deleted" }, job });
  io.stdout.write(`Box ${slug} ${DONE[action]}.\n`);
  if (box?.status === "running" && box.urls) {
    io.stdout.write(`  site  ${box.urls.site}\n  code  ${box.urls.code}\n`);
  }
}

function printBox(app: App, box: Box, last: Job | undefined): void {
  const now = app.io.now();
  const pairs: [string, string][] = [
    ["name", box.slug],
    [
      "status",
      box.statusReason ? `${box.status} (${failureText(box.statusReason, box.errorCode)})` : box.status,
    ],
    ["desired", box.desiredState],
    ["template", box.template],
    ["size", box.size],
    ["server", box.server ?? "-"],
    ["ip", box.ip ?? "-"],
    [
      "idle",
      box.idleTimeoutMinutes === null
        ? "never hibernates"
        : `hibernates after ${box.idleTimeoutMinutes} min idle${box.idleHibernatesAt ? ` (${formatIn(box.idleHibernatesAt, now)})` : ""}`,
    ],
    ...(box.memoryFileBytes !== null
      ? [["saved memory", formatBytes(box.memoryFileBytes)] as [string, string]]
      : []),
    ["site", box.urls?.site ?? "-"],
    ["code", box.urls?.code ?? "-"],
    ["created", `${box.createdAt} (${formatAge(box.createdAt, now)})`],
    ["actions", box.allowedActions.join(", ") || "-"],
  ];
  if (Object.keys(box.env).length > 0) pairs.push(["env", Object.keys(box.env).sort().join(", ")]);
  if (last) {
    const reason = failureText(last.error, last.errorCode);
    const error = reason ? `: ${reason}` : "";
    pairs.push([
      "last job",
      `${last.action} ${last.status} ${formatAge(last.createdAt, now)} (${shortId(last.id)})${error}`,
    ]);
  }
  printKeyValues(app.io.stdout, pairs);
}

/** Sizes as people read them: 1536 → "1.5 KiB". */
function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

import type { Command } from "commander";
import type { App } from "../app.ts";
import { usageError } from "../errors.ts";
import { examples, formatIn, printJson } from "../output.ts";
import { parseSlug } from "./box-args.ts";

/** `default` → null (the owner's default), `off`/`never`/0 → 0, else whole minutes. */
function parseMinutes(text: string, allowDefault: boolean): number | null {
  if (allowDefault && text === "default") return null;
  if (text === "off" || text === "never") return 0;
  if (!/^\d{1,5}$/.test(text)) {
    throw usageError(
      `"${text}" is not a number of minutes`,
      allowDefault ? "give minutes, off or default" : "give minutes or off",
    );
  }
  return Number(text);
}

/** Idle hibernation: keep a box awake, set its timeout, set your default. */
export function registerIdleCommands(program: Command, app: App): void {
  program
    .command("keep-awake <name>")
    .description("count a box as used now, so its idle timer starts again")
    .option("--json", "print JSON (the box)")
    .addHelpText("after", examples("doppio keep-awake my-box"))
    .action(async (name: string, opts: { json?: boolean }) => {
      const box = await (await app.api()).keepAwake(parseSlug(name));
      if (opts.json) return printJson(app.io.stdout, box);
      app.io.stdout.write(
        box.idleHibernatesAt
          ? `Box ${box.slug} hibernates ${formatIn(box.idleHibernatesAt, app.io.now())} unless it is used.\n`
          : `Box ${box.slug} does not hibernate when idle.\n`,
      );
    });

  program
    .command("idle <name> <minutes>")
    .description("hibernate a box after this many idle minutes (off: never; default: your default)")
    .option(
      "--public-wake <on|off>",
      "whether anyone's visit to its public site may wake it (default: only yours)",
    )
    .option("--json", "print JSON (the box)")
    .addHelpText(
      "after",
      examples(
        "doppio idle my-box 30",
        "doppio idle my-box off",
        "doppio idle my-box default --public-wake on",
      ),
    )
    .action(async (name: string, minutes: string, opts: { json?: boolean; publicWake?: string }) => {
      if (opts.publicWake !== undefined && opts.publicWake !== "on" && opts.publicWake !== "off") {
        throw usageError(`--public-wake takes on or off, not "${opts.publicWake}"`);
      }
      const publicWake = opts.publicWake === undefined ? undefined : opts.publicWake === "on";
      const box = await (await app.api()).setBoxIdle(
        parseSlug(name),
        parseMinutes(minutes, true),
        publicWake,
      );
      if (opts.json) return printJson(app.io.stdout, box);
      app.io.stdout.write(
        box.idleTimeoutMinutes === null
          ? `Box ${box.slug} does not hibernate when idle.\n`
          : `Box ${box.slug} hibernates after ${box.idleTimeoutMinutes} idle minutes.\n`,
      );
    });

  program
    .command("idle-default <minutes>")
    .description("your idle timeout for boxes without their own (off: never)")
    .addHelpText("after", examples("doppio idle-default 60", "doppio idle-default off"))
    .action(async (minutes: string) => {
      const m = parseMinutes(minutes, false);
      await (await app.api()).setIdleDefault(m);
      app.io.stdout.write(
        m
          ? `Your boxes hibernate after ${m} idle minutes unless set otherwise.\n`
          : "Your boxes do not hibernate when idle unless set otherwise.\n",
      );
    });
}

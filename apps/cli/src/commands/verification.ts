import type { Command } from "commander";
import type { App } from "../app.ts";
import { examples, printJson, printKeyValues } from "../output.ts";

/**
 * `doppio verify-email resend` (a new link to your address) and `doppio admin verify-email
 * <email>` (an administrator vouches for an address, e.g. where no mail transport is set up).
 * `doppio whoami` shows whether the address is verified.
 */
export function registerVerificationCommands(program: Command, app: App): void {
  program
    .command("verify-email")
    .description("verify your email address (trial credit comes with it)")
    .command("resend")
    .description("send a new verification link to your address (older links stop working)")
    .addHelpText("after", examples("doppio verify-email resend"))
    .action(async () => {
      await (await app.api()).run((sdk) => sdk.request("resendVerification", {}));
      app.io.stdout.write("a new verification link is on its way; open it to verify your address\n");
    });

  const admin = program.commands.find((c) => c.name() === "admin") ?? program.command("admin");
  admin
    .command("verify-email <email>")
    .description("mark an account's email address verified (grants its trial credit, once per address)")
    .option("--json", "print the account as JSON")
    .addHelpText("after", examples("doppio admin verify-email ann@example.com"))
    .action(async (email: string, opts: { json?: boolean }) => {
      const me = await (await app.api()).run((sdk) => sdk.request("markVerified", { body: { email } }));
      if (opts.json) return printJson(app.io.stdout, me);
      printKeyValues(app.io.stdout, [
        ["email", me.email],
        ["verified", me.emailVerified ? "yes" : "no"],
      ]);
    });
}

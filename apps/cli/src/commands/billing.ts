import { formatMoney, INVOICE_HTML_PATH, MS_PER_HOUR } from "@doppio/contracts";
import type { Command } from "commander";
import type { App } from "../app.ts";
import { examples, printJson, printKeyValues, renderTable } from "../output.ts";

/** `doppio wallet`, `doppio usage`, `doppio invoices`: the account's money, read-only. */
export function registerBillingCommands(program: Command, app: App): void {
  program
    .command("wallet")
    .description("show your balance, what your boxes burn per hour and the time left at that rate")
    .option("--json", "print JSON")
    .addHelpText("after", examples("doppio wallet", "doppio wallet --json | jq .balance"))
    .action(async (opts: { json?: boolean }) => {
      const w = await (await app.api()).wallet();
      if (opts.json) return printJson(app.io.stdout, w);
      const money = (n: number) => formatMoney(n, w.currency);
      printKeyValues(app.io.stdout, [
        [
          "balance",
          `${money(w.balance)}${w.balance <= 0 ? " (empty: top up to start boxes)" : w.low ? " (low)" : ""}`,
        ],
        ["burn rate", `${money(w.burnRatePerHour)}/h`],
        ["time left", w.hoursLeft === null ? "-" : `${w.hoursLeft} h at this rate`],
        [
          "card top-ups",
          w.cardTopUps ? "in the dashboard's Billing page" : "not configured (ask an administrator)",
        ],
      ]);
    });

  program
    .command("usage")
    .description("show each box's cost so far this month (UTC), compute and storage")
    .option("--json", "print JSON (the boxes of `doppio wallet --json`)")
    .addHelpText("after", examples("doppio usage", "doppio usage --json | jq '.[].compute'"))
    .action(async (opts: { json?: boolean }) => {
      const w = await (await app.api()).wallet();
      if (opts.json) return printJson(app.io.stdout, w.boxes);
      const money = (n: number) => formatMoney(n, w.currency);
      app.io.stdout.write(
        renderTable(
          ["BOX", "SIZE", "STATUS", "HOURS", "COMPUTE", "STORAGE", "NOW"],
          w.boxes.map((b) => [
            b.slug,
            b.size,
            b.status,
            (b.computeMs / MS_PER_HOUR).toFixed(2),
            money(b.compute),
            money(b.storage),
            `${money(b.ratePerHour)}/h`,
          ]),
        ),
      );
    });

  program
    .command("invoices")
    .description("list your monthly invoices")
    .option("--json", "print JSON")
    .addHelpText("after", examples("doppio invoices", "doppio invoices --json | jq '.[0].lines'"))
    .action(async (opts: { json?: boolean }) => {
      const api = await app.api();
      const invoices = await api.invoices();
      if (opts.json) return printJson(app.io.stdout, invoices);
      app.io.stdout.write(
        renderTable(
          ["MONTH", "USAGE", "CREDITS", "ISSUED", "PRINTABLE"],
          invoices.map((i) => [
            i.month,
            formatMoney(i.usageTotal, i.currency),
            formatMoney(i.creditsTotal, i.currency),
            i.issuedAt.slice(0, 10),
            api.baseUrl + INVOICE_HTML_PATH.replace(":id", encodeURIComponent(i.id)),
          ]),
        ),
      );
    });
}

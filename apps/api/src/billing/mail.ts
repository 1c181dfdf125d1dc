import { formatMoney } from "@doppio/contracts";
import nodemailer from "nodemailer";
import type { Logger } from "pino";
import type { ApiConfig } from "../config.ts";
import { logNotifier, type WalletNotifier } from "./funds.ts";

/**
 * Wallet notices as email through the configured SMTP server (nodemailer), each one also
 * logged. The callers catch a failed send, so a mail server that is down never blocks a
 * settlement, a top-up or a stop at zero.
 */
function mailNotifier(
  opts: { smtpUrl: string; mailFrom: string; publicUrl: string },
  log: Logger,
): WalletNotifier {
  const transport = nodemailer.createTransport(opts.smtpUrl);
  const logged = logNotifier({ log });
  const billing = new URL("/dashboard/billing", opts.publicUrl).toString();
  const send = (to: string, subject: string, text: string) =>
    transport.sendMail({ from: opts.mailFrom, to, subject, text: `${text}\n\n${billing}\n` });
  return {
    async walletWarning(user, event) {
      await logged.walletWarning(user, event);
      await send(
        user.email,
        event.state === "empty" ? "Your doppiobox wallet is empty" : "Your doppiobox balance is low",
        event.message,
      );
    },
    async topUpFailed(user, topUp) {
      await logged.topUpFailed(user, topUp);
      await send(
        user.email,
        "Your doppiobox top-up failed",
        `Your payment of ${formatMoney(topUp.amount, topUp.currency)} did not go through, so nothing was credited to your wallet. You can top up again from the Billing page.`,
      );
    },
  };
}

/** Email when `smtpUrl` and `mailFrom` are configured, else the log. */
export function walletNotifierFor(config: ApiConfig, log: Logger): WalletNotifier {
  if (config.smtpUrl && config.mailFrom) {
    return mailNotifier(
      { smtpUrl: config.smtpUrl, mailFrom: config.mailFrom, publicUrl: config.publicUrl },
      log,
    );
  }
  return logNotifier({ log });
}

import { formatMoney } from "@doppio/contracts";
import type { Logger } from "pino";
import type { ApiConfig } from "../config.ts";
import type { Mailer } from "../mail.ts";
import { logNotifier, type WalletNotifier } from "./funds.ts";

/**
 * Wallet notices as email through the configured SMTP server (mail.ts), each one also
 * logged. The callers catch a failed send, so a mail server that is down never blocks a
 * settlement, a top-up or a stop at zero.
 */
function mailNotifier(mailer: Mailer, publicUrl: string, log: Logger): WalletNotifier {
  const logged = logNotifier({ log });
  const billing = new URL("/dashboard/billing", publicUrl).toString();
  const send = (to: string, subject: string, text: string) =>
    mailer.send(to, subject, `${text}\n\n${billing}\n`);
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

/** Email when a mail transport is configured (mail.ts), else the log. */
export function walletNotifierFor(mailer: Mailer | null, config: ApiConfig, log: Logger): WalletNotifier {
  return mailer ? mailNotifier(mailer, config.publicUrl, log) : logNotifier({ log });
}

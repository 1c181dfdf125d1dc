import nodemailer from "nodemailer";
import type { ApiConfig } from "./config.ts";

/** Plain-text email to one address through the configured SMTP server. */
export interface Mailer {
  send(to: string, subject: string, text: string): Promise<void>;
}

/** The SMTP transport (nodemailer) when `smtpUrl` and `mailFrom` are set, else null. */
export function mailerFor(config: ApiConfig): Mailer | null {
  const { smtpUrl, mailFrom } = config;
  if (!smtpUrl || !mailFrom) return null;
  const transport = nodemailer.createTransport(smtpUrl);
  return {
    async send(to, subject, text) {
      await transport.sendMail({ from: mailFrom, to, subject, text });
    },
  };
}

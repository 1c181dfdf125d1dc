import { createServer, type Server, type Socket } from "node:net";

/** One message as the SMTP server received it. */
interface ReceivedMail {
  from: string;
  to: string[];
  /** The message's header fields (lower-case names; folded lines joined). */
  headers: Record<string, string>;
  /** The body, quoted-printable soft line breaks and escapes decoded. */
  text: string;
}

export interface SmtpSink {
  url: string;
  mail: ReceivedMail[];
  close(): Promise<void>;
}

const decodeQuotedPrintable = (s: string) =>
  s
    .replace(/=\r\n/g, "")
    .replace(/=([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16)));

function parse(from: string, to: string[], data: string): ReceivedMail {
  const cut = data.indexOf("\r\n\r\n");
  const head = data.slice(0, cut).replace(/\r\n[ \t]+/g, " ");
  const headers: Record<string, string> = {};
  for (const line of head.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0) headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = data.slice(cut + 4);
  const qp = /quoted-printable/i.test(headers["content-transfer-encoding"] ?? "");
  return { from, to, headers, text: qp ? decodeQuotedPrintable(body) : body };
}

/**
 * A local SMTP server for tests (RFC 5321's plain subset: EHLO/HELO, MAIL, RCPT, DATA with
 * dot-unstuffing, RSET, NOOP, QUIT; no STARTTLS, no AUTH), on 127.0.0.1, keeping every
 * message it accepts.
 */
export async function startSmtpSink(): Promise<SmtpSink> {
  const mail: ReceivedMail[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    let buf = "";
    let from = "";
    let to: string[] = [];
    let data: string[] | null = null;
    const reply = (line: string) => socket.write(`${line}\r\n`);
    reply("220 sink.test ESMTP ready");
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      buf += chunk;
      let nl = buf.indexOf("\r\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        nl = buf.indexOf("\r\n");
        if (data) {
          if (line === ".") {
            mail.push(parse(from, to, data.join("\r\n")));
            data = null;
            from = "";
            to = [];
            reply("250 2.0.0 queued");
          } else data.push(line.startsWith("..") ? line.slice(1) : line);
          continue;
        }
        const verb = line.slice(0, 4).toUpperCase();
        const arg = /<([^>]*)>/.exec(line)?.[1] ?? "";
        if (verb === "EHLO") reply("250-sink.test\r\n250-8BITMIME\r\n250 SMTPUTF8");
        else if (verb === "HELO") reply("250 sink.test");
        else if (verb === "MAIL") {
          from = arg;
          reply("250 2.1.0 ok");
        } else if (verb === "RCPT") {
          to.push(arg);
          reply("250 2.1.5 ok");
        } else if (verb === "DATA") {
          if (to.length === 0) reply("503 5.5.1 no recipients");
          else {
            data = [];
            reply("354 end with <CRLF>.<CRLF>");
          }
        } else if (verb === "RSET") {
          from = "";
          to = [];
          reply("250 2.0.0 ok");
        } else if (verb === "NOOP") reply("250 2.0.0 ok");
        else if (verb === "QUIT") {
          reply("221 2.0.0 bye");
          socket.end();
        } else reply("502 5.5.2 command not implemented");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `smtp://127.0.0.1:${port}`,
    mail,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

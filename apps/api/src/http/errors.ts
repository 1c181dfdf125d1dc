import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { ErrorBody } from "@doppio/contracts";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from "fastify-type-provider-zod";
import { AppError } from "../errors.ts";

const body = (code: ErrorBody["error"]["code"], message: string, details?: unknown): ErrorBody => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

/** Every failure leaves the API in one shape; internal messages never do. */
export function installErrorHandling(app: FastifyInstance): void {
  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send(body("not_found", `no route for ${req.method} ${req.url.split("?")[0]}`));
  });

  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (err instanceof AppError) {
      return reply.code(err.status).send(body(err.code, err.message, err.details));
    }
    if (hasZodFastifySchemaValidationErrors(err)) {
      const issues = err.validation.map((v) => ({
        where: err.validationContext,
        path: v.instancePath || "/",
        message: v.message,
      }));
      return reply
        .code(400)
        .send(body("validation_failed", `invalid request ${err.validationContext}`, { issues }));
    }
    if (isResponseSerializationError(err)) {
      req.log.error({ err }, "response did not match its schema");
      return reply.code(500).send(body("internal", "internal error"));
    }
    switch (err.code) {
      case "FST_ERR_CTP_BODY_TOO_LARGE":
        return reply.code(413).send(body("payload_too_large", "request body is too large"));
      case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
        return reply.code(415).send(body("bad_request", "send JSON with content-type application/json"));
      case "FST_ERR_CTP_EMPTY_JSON_BODY":
        return reply.code(400).send(body("bad_request", "the JSON body is empty"));
      case "FST_ERR_CTP_INVALID_JSON_BODY":
        return reply.code(400).send(body("bad_request", "the body is not valid JSON"));
    }
    if (err.statusCode === 429) {
      return reply.code(429).send(body("rate_limited", "too many attempts; wait a minute and try again"));
    }
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return reply.code(err.statusCode).send(body("bad_request", "malformed request"));
    }
    req.log.error({ err }, "unhandled error");
    return reply.code(500).send(body("internal", "internal error"));
  });
}

/**
 * Requests Node refuses before Fastify sees them (a URL or headers over Node's 16 KB, a
 * malformed request line, a timeout) also answer in the one error shape.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const [status, message] =
    err.code === "HPE_HEADER_OVERFLOW"
      ? [431, "the request's URL or headers are too large"]
      : err.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [408, "the request took too long to arrive"]
        : [400, "malformed HTTP request"];
  const json = JSON.stringify(body("bad_request", message));
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(json)}\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${json}`,
    );
  }
  socket.destroy(err);
}

/**
 * Errors Fastify's router raises before any route (and so before the error handler): a path
 * that does not decode (bad percent-escapes, invalid UTF-8) and a path parameter longer than
 * `maxParamLength`, which is a resource that does not exist, like any other junk name.
 */
export function frameworkErrors(err: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  if (err.code === "FST_ERR_MAX_PARAM_LENGTH") {
    reply.code(404).send(body("not_found", `no such resource: ${req.method} ${req.url.slice(0, 80)}…`));
  } else {
    reply.code(400).send(body("bad_request", "the URL is malformed (bad percent-encoding or UTF-8)"));
  }
}

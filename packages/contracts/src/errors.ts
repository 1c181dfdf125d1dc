import { z } from "zod";

/** The closed set of error codes any doppiobox HTTP API answers with. */
export const ERROR_CODES = [
  "bad_request",
  "validation_failed",
  "unauthorized",
  "payment_required",
  "forbidden",
  "not_found",
  "conflict",
  "not_configured",
  "payload_too_large",
  "rate_limited",
  "no_capacity",
  "unavailable",
  "internal",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** HTTP status for each code, so every edge maps codes the same way. */
export const ERROR_STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  validation_failed: 400,
  unauthorized: 401,
  payment_required: 402,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  not_configured: 409,
  payload_too_large: 413,
  rate_limited: 429,
  no_capacity: 503,
  unavailable: 503,
  internal: 500,
};

export const ErrorBody = z.object({
  error: z.object({
    code: z.enum(ERROR_CODES),
    message: z.string(),
    details: z.unknown().optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

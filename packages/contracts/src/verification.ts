import { z } from "zod";
import { Email, Me } from "./api.ts";
import { NoContent, route } from "./route.ts";

/** The dashboard page a verification link opens; the token travels in the fragment (`#token=`). */
export const VERIFY_EMAIL_PAGE = "/dashboard/verify-email";
/** How long a verification link works. */
export const VERIFICATION_TTL_HOURS = 24;

/** The token of a verification link (as mailed: `dpv_` and 43 base64url characters). */
export const VerifyEmailRequest = z.strictObject({ token: z.string().min(1).max(128) });
export const VerifyEmailResult = z.object({
  email: z.string(),
  /** Trial credit granted by this verification, in minor units (0: none, e.g. the address had one). */
  trialCredit: z.number().int(),
  currency: z.string(),
});
export type VerifyEmailResult = z.infer<typeof VerifyEmailResult>;
export const MarkVerifiedRequest = z.strictObject({ email: Email });

/** Email verification (the control plane's services/verification.ts). */
export const verificationRoutes = {
  verifyEmail: route({
    method: "POST",
    path: "/api/v1/auth/verify-email",
    summary: "Verify an email address with the token of its link (single use, 24 h); grants the trial credit",
    tag: "auth",
    auth: "none",
    // 400: the token is unknown, used, superseded or expired.
    errors: [400, 429],
    body: VerifyEmailRequest,
    responses: { 200: VerifyEmailResult },
  }),
  resendVerification: route({
    method: "POST",
    path: "/api/v1/me/verification",
    summary: "Send a new verification link to your address (older links stop working); rate-limited",
    tag: "auth",
    auth: "user",
    // 409: already verified.
    errors: [409, 429],
    responses: { 204: NoContent },
  }),
  markVerified: route({
    method: "POST",
    path: "/api/v1/admin/verify-email",
    summary: "Mark an account's email as verified (administrators only); grants the trial credit",
    tag: "auth",
    auth: "admin",
    errors: [404],
    body: MarkVerifiedRequest,
    responses: { 200: Me },
  }),
} as const;

import type { Me } from "@doppio/contracts";
import { useMutation } from "@tanstack/react-query";
import { call } from "../api/client.ts";
import { ErrorNotice } from "./ErrorNotice.tsx";

/** Shown on every page while the user's email address is not verified (no trial credit until it is). */
export function VerifyBanner({ me }: { me: Me }) {
  const resend = useMutation({ mutationFn: () => call("resendVerification", {}) });
  if (me.emailVerified) return null;
  return (
    <div className="notice" role="status" data-verify-banner="">
      <p>
        Verify your email address ({me.email}) to receive your trial credit: open the link we sent you.{" "}
        {resend.isSuccess ? (
          <span data-verify-resent="">A new link is on its way; older links no longer work.</span>
        ) : (
          <button
            type="button"
            className="btn btn-small"
            onClick={() => resend.mutate()}
            disabled={resend.isPending}
          >
            {resend.isPending ? "Sending…" : "Resend the link"}
          </button>
        )}
      </p>
      {resend.isError && <ErrorNotice error={resend.error} />}
    </div>
  );
}

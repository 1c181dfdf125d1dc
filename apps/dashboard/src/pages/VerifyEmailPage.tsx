import { formatMoney } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import { call } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { EmptyState } from "../components/EmptyState.tsx";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { Link } from "../lib/router.tsx";

/**
 * Where a verification link lands (`/dashboard/verify-email#token=…`): the token is in the
 * fragment, so it never reaches a server log or a Referer; it is posted once and dropped
 * from the address bar. Works signed in or not (the link may open in another browser).
 */
const tokenInAddress = () => new URLSearchParams(window.location.hash.slice(1)).get("token");

export function VerifyEmailPage({ signedIn }: { signedIn: boolean }) {
  const qc = useQueryClient();
  const verify = useMutation({
    mutationFn: (token: string) => call("verifyEmail", { body: { token } }),
    onSuccess: () => {
      void qc.invalidateQueries({ queryKey: keys.me });
      void qc.invalidateQueries({ queryKey: keys.wallet });
      void qc.invalidateQueries({ queryKey: ["ledger"] });
    },
  });
  const [token, setToken] = useState(tokenInAddress);
  // A second link opened in the same tab changes only the fragment: no new page load.
  useEffect(() => {
    const onHash = () => {
      const t = tokenInAddress();
      if (t) setToken(t);
    };
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  const posted = useRef<string | null>(null);
  const { mutate } = verify;
  useEffect(() => {
    // Each token once, even when React runs the effect twice: a token is single use.
    if (!token || posted.current === token) return;
    posted.current = token;
    window.history.replaceState(null, "", window.location.pathname);
    mutate(token);
  }, [token, mutate]);

  const next = signedIn ? <Link to="/">Go to your boxes</Link> : <Link to="/login">Log in</Link>;
  if (!token) {
    return (
      <EmptyState title="No verification link">
        <p>Open the link from the email we sent you. Signed in, you can send a new one from the banner.</p>
        {next}
      </EmptyState>
    );
  }
  if (verify.isError) {
    return (
      <EmptyState title="This link did not work">
        <ErrorNotice error={verify.error} />
        {next}
      </EmptyState>
    );
  }
  if (!verify.data) return <Loading />;
  const r = verify.data;
  return (
    <EmptyState title="Email address verified">
      <p data-verified={r.email}>
        {r.email} is verified.{" "}
        {r.trialCredit > 0
          ? `${formatMoney(r.trialCredit, r.currency)} of trial credit was added to your wallet.`
          : "No trial credit came with it: this address already had its trial."}
      </p>
      {next}
    </EmptyState>
  );
}

import { formatMoney } from "@doppio/contracts";
import { useWallet } from "../api/queries.ts";
import { Link } from "../lib/router.tsx";

/** Shown on every page while the balance is at or under the warning threshold. */
export function WalletBanner() {
  const wallet = useWallet();
  const w = wallet.data;
  if (!w?.low) return null;
  const empty = w.balance <= 0;
  return (
    <div
      className={`notice ${empty ? "notice-error" : ""}`}
      role="alert"
      data-wallet-banner={empty ? "empty" : "low"}
    >
      {empty
        ? `Your wallet is empty (${formatMoney(w.balance, w.currency)}): running boxes are stopped and new ones cannot start. `
        : `Your balance is low (${formatMoney(w.balance, w.currency)}); boxes stop when it reaches zero. `}
      <Link to="/billing">Top up</Link>
    </div>
  );
}

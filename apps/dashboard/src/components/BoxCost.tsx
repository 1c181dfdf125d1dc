import { formatMoney } from "@doppio/contracts";
import { useWallet } from "../api/queries.ts";

/** A box's running cost: what it costs per hour in its state now, and so far this month. */
export function BoxCost({ slug }: { slug: string }) {
  const wallet = useWallet();
  const cost = wallet.data?.boxes.find((b) => b.slug === slug);
  if (!wallet.data || !cost) return null;
  const money = (n: number) => formatMoney(n, wallet.data.currency);
  return (
    <p className="muted small" data-box-cost={slug}>
      Costs {money(cost.ratePerHour)}/h now · {money(cost.compute + cost.storage)} this month (compute{" "}
      {money(cost.compute)}, storage {money(cost.storage)})
    </p>
  );
}

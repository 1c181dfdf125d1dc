import {
  formatMoney,
  INVOICE_HTML_PATH,
  LEDGER_KINDS,
  type LedgerKind,
  MS_PER_HOUR,
  type TopUpStatus,
  type Wallet,
} from "@doppio/contracts";
import { useMutation } from "@tanstack/react-query";
import { type FormEvent, useState } from "react";
import { call } from "../api/client.ts";
import { useInvoices, useLedger, useTopUps, useWallet } from "../api/queries.ts";
import { ErrorNotice } from "../components/ErrorNotice.tsx";
import { Loading } from "../components/Loading.tsx";
import { parseAmount } from "../lib/money.ts";
import { Link } from "../lib/router.tsx";

export function BillingPage() {
  const wallet = useWallet();
  if (wallet.isPending) return <Loading />;
  if (wallet.isError) return <ErrorNotice error={wallet.error} onRetry={() => wallet.refetch()} />;
  const w = wallet.data;
  const money = (n: number) => formatMoney(n, w.currency);
  return (
    <>
      <div className="page-head">
        <h1>Billing</h1>
      </div>
      <section className="card" aria-label="Wallet">
        <dl className="billing-figures">
          <div>
            <dt>Balance</dt>
            <dd data-balance={w.balance}>{money(w.balance)}</dd>
          </div>
          <div>
            <dt>Burn rate now</dt>
            <dd>{money(w.burnRatePerHour)} per hour</dd>
          </div>
          <div>
            <dt>Time left at this rate</dt>
            <dd>{w.hoursLeft === null ? "—" : `${w.hoursLeft} hours`}</dd>
          </div>
        </dl>
      </section>
      <TopUp wallet={w} />
      <TopUps cardTopUps={w.cardTopUps} />
      <section className="card" aria-label="Cost per box this month">
        <h2>This month, per box</h2>
        {w.boxes.length === 0 ? (
          <p className="empty-line muted">No boxes yet.</p>
        ) : (
          <table className="table">
            <thead>
              <tr>
                <th>Box</th>
                <th>Size</th>
                <th>Running</th>
                <th>Compute</th>
                <th>Storage</th>
                <th>Now</th>
              </tr>
            </thead>
            <tbody>
              {w.boxes.map((b) => (
                <tr key={b.slug}>
                  <td>
                    <Link to={`/boxes/${encodeURIComponent(b.slug)}`}>{b.slug}</Link>
                  </td>
                  <td>{b.size}</td>
                  <td>{(b.computeMs / MS_PER_HOUR).toFixed(1)} h</td>
                  <td>{money(b.compute)}</td>
                  <td>{money(b.storage)}</td>
                  <td>{money(b.ratePerHour)}/h</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <Ledger currency={w.currency} />
      <Invoices />
    </>
  );
}

function TopUp({ wallet }: { wallet: Wallet }) {
  const [amount, setAmount] = useState("20");
  const topUp = useMutation({
    mutationFn: (minor: number) => call("createTopUp", { body: { amount: minor } }),
    // Stripe's hosted page takes the card; the wallet is credited when Stripe confirms.
    onSuccess: (s) => window.location.assign(s.url),
  });
  const minor = parseAmount(amount);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (minor) topUp.mutate(minor);
  };
  if (!wallet.cardTopUps) {
    return (
      <section className="card" aria-label="Top up">
        <h2>Top up</h2>
        <p className="muted" data-topup="not-configured">
          Card payments are not configured on this doppiobox. Ask an administrator to credit your wallet.
        </p>
      </section>
    );
  }
  return (
    <form className="card inline-form" aria-label="Top up" onSubmit={submit}>
      <label className="field grow">
        <span>Top up ({wallet.currency})</span>
        <input
          name="topup-amount"
          inputMode="decimal"
          value={amount}
          onChange={(e) => setAmount(e.target.value)}
        />
      </label>
      <button type="submit" className="btn btn-primary" disabled={!minor || topUp.isPending}>
        {topUp.isPending ? "Opening checkout…" : "Pay by card"}
      </button>
      {topUp.isError && <ErrorNotice error={topUp.error} />}
    </form>
  );
}

const TOP_UP_LABELS: Record<TopUpStatus, string> = {
  open: "awaiting payment",
  processing: "processing",
  paid: "paid",
  failed: "failed",
  expired: "expired",
  refunded: "refunded",
};

/** The user's recent card top-ups: where each stands, and why a failed one credited nothing. */
function TopUps({ cardTopUps }: { cardTopUps: boolean }) {
  const topUps = useTopUps();
  if (!cardTopUps && !topUps.data?.length) return null;
  return (
    <section className="card" aria-label="Top-ups">
      <h2>Top-ups</h2>
      {topUps.isPending ? (
        <Loading />
      ) : topUps.isError ? (
        <ErrorNotice error={topUps.error} />
      ) : topUps.data.length === 0 ? (
        <p className="empty-line muted">No card top-ups yet.</p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>Started</th>
              <th>Amount</th>
              <th>Status</th>
              <th>Details</th>
            </tr>
          </thead>
          <tbody>
            {topUps.data.map((t) => (
              <tr key={t.sessionId} data-topup-row={t.sessionId} data-topup-status={t.status}>
                <td>{t.createdAt.replace(/\.\d+Z$/, "Z")}</td>
                <td>{formatMoney(t.amount, t.currency)}</td>
                <td className={t.status === "failed" || t.status === "expired" ? "error-text" : undefined}>
                  {TOP_UP_LABELS[t.status]}
                </td>
                <td className="small">
                  {t.failureReason
                    ? t.failureReason.charAt(0).toUpperCase() + t.failureReason.slice(1)
                    : t.refunded > 0
                      ? `${formatMoney(t.refunded, t.currency)} taken back by refunds or disputes`
                      : ""}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Ledger({ currency }: { currency: string }) {
  const [kind, setKind] = useState<LedgerKind | "">("");
  const ledger = useLedger(kind);
  return (
    <section className="card" aria-label="Ledger">
      <div className="card-head">
        <h2>Ledger</h2>
        <label className="field">
          <span className="visually-hidden">Show</span>
          <select
            name="ledger-kind"
            value={kind}
            onChange={(e) => setKind(e.target.value as LedgerKind | "")}
          >
            <option value="">everything</option>
            {LEDGER_KINDS.map((k) => (
              <option key={k} value={k}>
                {k.replace("_", " ")}
              </option>
            ))}
          </select>
        </label>
      </div>
      {ledger.isPending ? (
        <Loading />
      ) : ledger.isError ? (
        <ErrorNotice error={ledger.error} />
      ) : ledger.data.length === 0 ? (
        <p className="empty-line muted">Nothing yet.</p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>When</th>
              <th>What</th>
              <th>Box</th>
              <th>Amount</th>
            </tr>
          </thead>
          <tbody>
            {ledger.data.map((e) => (
              <tr key={e.seq}>
                <td>{e.at.replace(/\.\d+Z$/, "Z")}</td>
                <td>
                  {e.kind.replace("_", " ")}
                  {e.memo ? <span className="muted small"> · {e.memo}</span> : null}
                </td>
                <td>{e.box ?? ""}</td>
                <td className={e.amount < 0 ? "error-text" : "ok-text"}>{formatMoney(e.amount, currency)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Invoices() {
  const invoices = useInvoices();
  return (
    <section className="card" aria-label="Invoices">
      <h2>Invoices</h2>
      {invoices.isPending ? (
        <Loading />
      ) : invoices.isError ? (
        <ErrorNotice error={invoices.error} />
      ) : invoices.data.length === 0 ? (
        <p className="empty-line muted">Your first invoice comes after your first month ends.</p>
      ) : (
        <ul className="token-list">
          {invoices.data.map((i) => (
            <li key={i.id} className="token-item">
              <strong>{i.month}</strong>
              <span>
                usage {formatMoney(i.usageTotal, i.currency)} · credits{" "}
                {formatMoney(i.creditsTotal, i.currency)}
              </span>
              <a
                href={INVOICE_HTML_PATH.replace(":id", encodeURIComponent(i.id))}
                target="_blank"
                rel="noreferrer"
              >
                Printable
              </a>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

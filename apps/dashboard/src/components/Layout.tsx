import type { Me } from "@doppio/contracts";
import { useQueryClient } from "@tanstack/react-query";
import { type ReactNode, useEffect, useRef } from "react";
import { call } from "../api/client.ts";
import type { LiveState } from "../api/events.ts";
import { keys } from "../api/keys.ts";
import { Link, navigate, useLocation } from "../lib/router.tsx";
import { VerifyBanner } from "./VerifyBanner.tsx";
import { WalletBanner } from "./WalletBanner.tsx";

const LIVE_TEXT: Record<LiveState, string> = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
};

export function Layout({ me, live, children }: { me: Me; live: LiveState; children: ReactNode }) {
  const qc = useQueryClient();
  const { path } = useLocation();
  const main = useRef<HTMLElement>(null);
  const firstPath = useRef(path);
  // After an in-app navigation, start keyboard and screen-reader users at the new page's content.
  useEffect(() => {
    if (path !== firstPath.current) main.current?.focus({ preventScroll: true });
    firstPath.current = "";
  }, [path]);
  const logout = async () => {
    try {
      await call("logout", {});
    } finally {
      qc.clear();
      qc.setQueryData(keys.me, null);
      navigate("/login", { replace: true });
    }
  };
  const nav = [
    { to: "/", label: "Boxes", current: path === "/" || path.startsWith("/boxes") || path === "/new" },
    { to: "/billing", label: "Billing", current: path === "/billing" },
    { to: "/tokens", label: "API tokens", current: path === "/tokens" },
    { to: "/settings", label: "Settings", current: path === "/settings" },
    ...(me.role === "admin" ? [{ to: "/servers", label: "Servers", current: path === "/servers" }] : []),
  ];
  return (
    <div className="shell">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link to="/" className="brand">
          doppio<span>box</span>
        </Link>
        <nav aria-label="Main" className="nav">
          {nav.map((n) => (
            <Link key={n.to} to={n.to} aria-current={n.current ? "page" : undefined}>
              {n.label}
            </Link>
          ))}
        </nav>
        <div className="topbar-end">
          <span className={`live live-${live}`} role="status" title="Status updates stream in live">
            <span className="badge-dot" aria-hidden="true" />
            {LIVE_TEXT[live]}
          </span>
          <span className="who" title={me.email}>
            {me.name ?? me.email}
          </span>
          <button type="button" className="btn btn-small" onClick={logout}>
            Log out
          </button>
        </div>
      </header>
      <main ref={main} id="main" className="main" tabIndex={-1}>
        <VerifyBanner me={me} />
        <WalletBanner />
        {children}
      </main>
    </div>
  );
}

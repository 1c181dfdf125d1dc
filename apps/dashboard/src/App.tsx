import { useEffect } from "react";
import { useLiveEvents } from "./api/events.ts";
import { useMe } from "./api/queries.ts";
import { ErrorNotice } from "./components/ErrorNotice.tsx";
import { Layout } from "./components/Layout.tsx";
import { Loading } from "./components/Loading.tsx";
import { navigate, useLocation } from "./lib/router.tsx";
import { BillingPage } from "./pages/BillingPage.tsx";
import { BoxesPage } from "./pages/BoxesPage.tsx";
import { BoxPage } from "./pages/BoxPage.tsx";
import { CreateBoxPage } from "./pages/CreateBoxPage.tsx";
import { LoginPage } from "./pages/LoginPage.tsx";
import { NotFoundPage } from "./pages/NotFoundPage.tsx";
import { ServersPage } from "./pages/ServersPage.tsx";
import { SettingsPage } from "./pages/SettingsPage.tsx";
import { TokensPage } from "./pages/TokensPage.tsx";
import { VerifyEmailPage } from "./pages/VerifyEmailPage.tsx";

const TITLES: Record<string, string> = {
  "/": "Boxes",
  "/new": "Create a box",
  "/tokens": "API tokens",
  "/servers": "Servers",
  "/billing": "Billing",
  "/settings": "Settings",
  "/login": "Log in",
  "/signup": "Sign up",
  "/verify-email": "Verify your email",
};

function page(path: string, admin: boolean) {
  if (path === "/") return <BoxesPage />;
  if (path === "/new") return <CreateBoxPage />;
  if (path === "/tokens") return <TokensPage />;
  if (path === "/billing") return <BillingPage />;
  if (path === "/settings") return <SettingsPage />;
  if (path === "/servers" && admin) return <ServersPage />;
  const box = /^\/boxes\/([^/]+)$/.exec(path);
  if (box) return <BoxPage key={box[1]} slug={decodeURIComponent(box[1]!)} />;
  return <NotFoundPage />;
}

export function App() {
  const { path, search } = useLocation();
  const me = useMe();
  const publicPage = path === "/login" || path === "/signup";
  // A verification link opens signed in or not (another browser): it shows either way.
  const verifyPage = path === "/verify-email";
  const live = useLiveEvents(Boolean(me.data));

  useEffect(() => {
    const slug = /^\/boxes\/([^/]+)$/.exec(path)?.[1];
    document.title = `${slug ? decodeURIComponent(slug) : (TITLES[path] ?? "doppiobox")} · doppiobox`;
  }, [path]);

  // Signed out on a private page: go to login and come back afterwards.
  useEffect(() => {
    if (me.data === null && !publicPage && !verifyPage) {
      navigate(`/login?next=${encodeURIComponent(`/dashboard${path}${search.size ? `?${search}` : ""}`)}`, {
        replace: true,
      });
    }
    if (me.data && publicPage) navigate("/", { replace: true });
  }, [me.data, publicPage, verifyPage, path, search]);

  if (me.isPending) return <Loading />;
  if (me.isError) {
    return (
      <main className="auth" id="main">
        <ErrorNotice error={me.error} onRetry={() => me.refetch()} />
      </main>
    );
  }
  if (verifyPage && !me.data) {
    return (
      <main className="auth" id="main">
        <VerifyEmailPage signedIn={false} />
      </main>
    );
  }
  if (verifyPage && me.data) {
    return (
      <Layout me={me.data} live={live}>
        <VerifyEmailPage signedIn />
      </Layout>
    );
  }
  if (publicPage) {
    if (me.data) return <Loading />;
    return <LoginPage mode={path === "/signup" ? "signup" : "login"} />;
  }
  if (!me.data) return <Loading />;
  return (
    <Layout me={me.data} live={live}>
      {page(path, me.data.role === "admin")}
    </Layout>
  );
}

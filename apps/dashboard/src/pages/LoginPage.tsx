import { GITHUB_SIGNIN_ERRORS, type GitHubSignInError } from "@doppio/contracts";
import { useQueryClient } from "@tanstack/react-query";
import { call } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { AuthForm, type AuthValues } from "../components/AuthForm.tsx";
import { goNext, Link, useLocation } from "../lib/router.tsx";

export function LoginPage({ mode }: { mode: "login" | "signup" }) {
  const qc = useQueryClient();
  const { search } = useLocation();
  const next = search.get("next");
  const keep = next ? `?next=${encodeURIComponent(next)}` : "";
  const signup = mode === "signup";
  const githubError = search.get("github_error");

  const submit = async (v: AuthValues) => {
    const body = signup
      ? { email: v.email, password: v.password, ...(v.name.trim() ? { name: v.name.trim() } : {}) }
      : { email: v.email, password: v.password };
    const me = await call(signup ? "signup" : "login", { body });
    qc.setQueryData(keys.me, me);
    goNext(next);
  };

  return (
    <main className="auth" id="main">
      <div className="auth-card">
        <p className="brand brand-large">
          doppio<span>box</span>
        </p>
        <h1>{signup ? "Create your account" : "Log in"}</h1>
        <p className="muted">
          {signup ? "Get a Frappe dev box with a site and VS Code in your browser." : "Welcome back."}
        </p>
        {githubError && (
          <div className="notice notice-error" role="alert">
            <p>
              {GITHUB_SIGNIN_ERRORS[githubError as GitHubSignInError] ??
                "Signing in with GitHub did not complete."}
            </p>
          </div>
        )}
        <AuthForm key={mode} mode={mode} onSubmit={submit} />
        <p className="auth-alt">
          <a className="btn btn-block" href="/api/v1/auth/github">
            Sign in with GitHub
          </a>
        </p>
        <p className="auth-switch">
          {signup ? "Already have an account? " : "New here? "}
          <Link to={`${signup ? "/login" : "/signup"}${keep}`}>
            {signup ? "Log in" : "Create an account"}
          </Link>
        </p>
      </div>
    </main>
  );
}

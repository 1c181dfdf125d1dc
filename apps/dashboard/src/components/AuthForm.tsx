import { PASSWORD_MIN } from "@doppio/contracts";
import { type FormEvent, useState } from "react";
import { errorText } from "../api/client.ts";

export interface AuthValues {
  email: string;
  password: string;
  name: string;
}

interface Props {
  mode: "login" | "signup";
  onSubmit(values: AuthValues): Promise<void>;
}

/** Sign-up and log-in share one form; sign-up checks the password length before asking the server. */
export function AuthForm({ mode, onSubmit }: Props) {
  const [values, setValues] = useState<AuthValues>({ email: "", password: "", name: "" });
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const signup = mode === "signup";

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    if (signup && values.password.length < PASSWORD_MIN) {
      setError(`Choose a longer password: at least ${PASSWORD_MIN} characters.`);
      return;
    }
    setBusy(true);
    try {
      await onSubmit(values);
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  const set = (k: keyof AuthValues) => (e: { target: { value: string } }) =>
    setValues((v) => ({ ...v, [k]: e.target.value }));

  return (
    <form className="form" onSubmit={submit} noValidate>
      {error && (
        <div className="notice notice-error" role="alert">
          <p>{error}</p>
        </div>
      )}
      {signup && (
        <label className="field">
          <span>Name (optional)</span>
          <input name="name" autoComplete="name" value={values.name} onChange={set("name")} />
        </label>
      )}
      <label className="field">
        <span>Email</span>
        <input
          name="email"
          type="email"
          autoComplete="email"
          required
          value={values.email}
          onChange={set("email")}
        />
      </label>
      <label className="field">
        <span>Password</span>
        <input
          name="password"
          type="password"
          autoComplete={signup ? "new-password" : "current-password"}
          required
          aria-describedby={signup ? "password-hint" : undefined}
          value={values.password}
          onChange={set("password")}
        />
        {signup && (
          <small id="password-hint" className="hint">
            At least {PASSWORD_MIN} characters.
          </small>
        )}
      </label>
      <button type="submit" className="btn btn-primary btn-block" disabled={busy}>
        {busy ? "Please wait…" : signup ? "Create account" : "Log in"}
      </button>
    </form>
  );
}

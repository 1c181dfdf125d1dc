import { useEffect, useState } from "react";

/** Copies `text`; says so for a moment. Clipboard access can be refused: then it says that instead. */
/** `label` names what is copied for screen readers; the visible text stays short. */
export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [state, setState] = useState<"idle" | "copied" | "failed">("idle");
  useEffect(() => {
    if (state === "idle") return;
    const t = setTimeout(() => setState("idle"), 2000);
    return () => clearTimeout(t);
  }, [state]);
  const copy = () => {
    if (!navigator.clipboard) {
      setState("failed");
      return;
    }
    navigator.clipboard.writeText(text).then(
      () => setState("copied"),
      () => setState("failed"),
    );
  };
  return (
    <button type="button" className="btn btn-small" onClick={copy} aria-label={label}>
      <span aria-live="polite">
        {state === "copied" ? "Copied" : state === "failed" ? "Copy by hand" : "Copy"}
      </span>
    </button>
  );
}

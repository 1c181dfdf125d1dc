import type { Box, BoxAction, RouteName } from "@doppio/contracts";
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { putBox, putJob } from "../api/cache.ts";
import { call, errorText } from "../api/client.ts";
import { navigate } from "../lib/router.tsx";
import { ConfirmDialog } from "./ConfirmDialog.tsx";

type Action = Exclude<BoxAction, "create">;

const ROUTES = {
  start: "startBox",
  stop: "stopBox",
  hibernate: "hibernateBox",
  reset: "resetBox",
  delete: "deleteBox",
} as const satisfies Record<Action, RouteName>;

/**
 * Start (or resume), stop, hibernate, reset, delete; enabled from the box's allowedActions,
 * destructive ones confirmed first.
 */
export function BoxActions({ box }: { box: Box }) {
  const qc = useQueryClient();
  const [confirm, setConfirm] = useState<"reset" | "delete" | null>(null);
  const run = useMutation({
    mutationFn: (action: Action) => call(ROUTES[action], { params: { slug: box.slug } }),
    onSuccess: (res, action) => {
      putBox(qc, res.box);
      putJob(qc, res.job);
      setConfirm(null);
      if (action === "delete") navigate("/");
    },
  });
  const allowed = (a: Action) => box.allowedActions.includes(a) && !run.isPending;
  const button = (a: Action, label: string, cls = "btn") => (
    <button
      type="button"
      className={cls}
      disabled={!allowed(a)}
      onClick={() => (a === "reset" || a === "delete" ? setConfirm(a) : run.mutate(a))}
    >
      {run.isPending && run.variables === a ? `${label}…` : label}
    </button>
  );

  return (
    <div className="actions-wrap">
      <div className="actions">
        {button("start", box.status === "hibernated" ? "Resume" : "Start")}
        {button("stop", "Stop")}
        {button("hibernate", "Hibernate")}
        {button("reset", "Reset")}
        {button("delete", "Delete", "btn btn-danger-outline")}
      </div>
      {run.isError && !confirm && (
        <div className="notice notice-error" role="alert">
          <p>{errorText(run.error)}</p>
        </div>
      )}
      <ConfirmDialog
        open={confirm === "reset"}
        title={`Reset ${box.slug}?`}
        confirmLabel="Reset box"
        danger
        busy={run.isPending}
        onClose={() => setConfirm(null)}
        onConfirm={() => run.mutate("reset")}
      >
        <p>
          Reset wipes the box's disk back to a fresh copy of the <strong>{box.template}</strong> template.
          Your files, databases and installed apps on this box are lost.
        </p>
        <p>The name, URLs and environment variables stay the same.</p>
        {run.isError && <p className="error-text">{errorText(run.error)}</p>}
      </ConfirmDialog>
      <ConfirmDialog
        open={confirm === "delete"}
        title={`Delete ${box.slug}?`}
        confirmLabel="Delete box"
        danger
        busy={run.isPending}
        onClose={() => setConfirm(null)}
        onConfirm={() => run.mutate("delete")}
      >
        <p>
          Delete removes everything: the box's disk, its files and databases, and its site and VS Code URLs.
          This cannot be undone.
        </p>
        {run.isError && <p className="error-text">{errorText(run.error)}</p>}
      </ConfirmDialog>
    </div>
  );
}

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { call, errorText } from "../api/client.ts";
import { keys } from "../api/keys.ts";
import { CopyButton } from "./CopyButton.tsx";

/**
 * How the control plane reaches a server over SSH, and its public key to install there first.
 * The pinned host key shows once the first play has met it.
 */
export function ServerSshForm({ server }: { server: string }) {
  const qc = useQueryClient();
  const key = useQuery({
    queryKey: keys.sshKey,
    queryFn: () => call("getControlPlaneSshKey", {}),
    staleTime: Infinity,
  });
  const ssh = useQuery({
    queryKey: keys.serverSsh(server),
    queryFn: async () => (await call("getServerSsh", { params: { name: server } })).ssh,
  });
  const [host, setHost] = useState("");
  const [user, setUser] = useState("root");
  const save = useMutation({
    mutationFn: () => call("setServerSsh", { params: { name: server }, body: { host, user, port: 22 } }),
    onSuccess: (data) => qc.setQueryData(keys.serverSsh(server), data),
  });
  return (
    <details className="server-ssh" open={ssh.data === null}>
      <summary>
        SSH{" "}
        {ssh.data ? (
          <span className="muted small">
            {ssh.data.user}@{ssh.data.host}:{ssh.data.port} · host key{" "}
            {ssh.data.hostKeys ? "pinned" : "not met yet"}
          </span>
        ) : (
          <span className="muted small">not set</span>
        )}
      </summary>
      {key.data && (
        <p className="small">
          Install the control plane's key in the host's <code>~/.ssh/authorized_keys</code>:{" "}
          <code className="ssh-key">{key.data.publicKey}</code> <CopyButton text={key.data.publicKey} />
        </p>
      )}
      <form
        className="ssh-form"
        onSubmit={(e) => {
          e.preventDefault();
          save.mutate();
        }}
      >
        <label>
          Address{" "}
          <input value={host} onChange={(e) => setHost(e.target.value)} placeholder="203.0.113.10" required />
        </label>
        <label>
          User <input value={user} onChange={(e) => setUser(e.target.value)} required />
        </label>
        <button type="submit" className="btn btn-small" disabled={save.isPending}>
          Save
        </button>
        {save.isError && (
          <span className="error-text small" role="alert">
            {errorText(save.error)}
          </span>
        )}
      </form>
    </details>
  );
}

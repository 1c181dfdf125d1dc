import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";

export interface SshKey {
  /** Path of the private key (0600, only the control plane's user can read it). */
  privateKeyPath: string;
  /** One authorized_keys line. */
  publicKey: string;
  fingerprint: string;
}

/**
 * The control plane's own ed25519 key pair, made once in `<dataDir>/ssh/`. Plays log in to
 * hosts with it; admins install the public half on a host (root's or a sudoer's
 * authorized_keys) before preparing it.
 */
export function ensureSshKey(dataDir: string): SshKey {
  const dir = path.join(dataDir, "ssh");
  const privateKeyPath = path.resolve(dir, "id_ed25519");
  if (!existsSync(`${privateKeyPath}.pub`)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    rmSync(privateKeyPath, { force: true });
    execFileSync("ssh-keygen", [
      "-q",
      "-t",
      "ed25519",
      "-N",
      "",
      "-C",
      "doppiobox-control-plane",
      "-f",
      privateKeyPath,
    ]);
  }
  // ssh refuses a private key others can read.
  chmodSync(privateKeyPath, 0o600);
  const publicKey = readFileSync(`${privateKeyPath}.pub`, "utf8").trim();
  const fingerprint = execFileSync("ssh-keygen", ["-l", "-E", "sha256", "-f", `${privateKeyPath}.pub`], {
    encoding: "utf8",
  }).split(" ")[1]!;
  return { privateKeyPath, publicKey, fingerprint };
}

import { createHash, randomBytes } from "node:crypto";
import type { AgentConfig } from "../config.ts";

/** A fresh metadata-service bearer for one boot of a box, and the digest the agent keeps. */
export function newMetadataToken(): { token: string; sha256: string } {
  const token = randomBytes(32).toString("base64url");
  return { token, sha256: tokenSha256(token) };
}

export function tokenSha256(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** Where guests reach the metadata service: their gateway, on the configured port. */
export function metadataUrl(config: AgentConfig, gateway: string): string {
  return config.metadata.enabled ? `http://${gateway}:${config.metadata.port}` : "";
}

/**
 * The GitHub web URL a guest is given: the box's own, except that a GitHub on one of
 * `userModeHostPorts` of the host's loopback (a local stack's stand-in) is reached at the
 * guest's gateway, where QEMU forwards those ports.
 */
export function guestGitHubUrl(config: AgentConfig, url: string, gateway: string): string {
  if (config.networkMode !== "user") return url;
  const u = new URL(url);
  const loopback = u.hostname === "127.0.0.1" || u.hostname === "localhost";
  if (!loopback || !config.userModeHostPorts.includes(Number(u.port))) return url;
  u.hostname = gateway;
  return u.origin;
}

/**
 * The host address the service binds: the bridge's gateway address in tap mode (guests
 * reach it directly); 127.0.0.1 in user mode, where QEMU forwards the guest's gateway
 * address to the host's loopback.
 */
export function metadataListenHost(config: AgentConfig, gateway: string): string {
  return config.networkMode === "user" ? "127.0.0.1" : gateway;
}

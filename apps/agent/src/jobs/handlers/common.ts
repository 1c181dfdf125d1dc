import { randomBytes, randomUUID } from "node:crypto";
import { type BoxJobPayload, boxUrls, DEFAULT_GITHUB_WEB_URL } from "@doppio/contracts";
import { guestGitHubUrl, metadataUrl, newMetadataToken } from "../../metadata/tokens.ts";
import { macForIp, tapNameForIp } from "../../net/naming.ts";
import type { BoxSpec, StoredBox } from "../../store/boxes.ts";
import type { BoxSecrets, Upstream, VmSpec } from "../../vmm/executor.ts";
import type { HandlerDeps } from "../registry.ts";

/** Fresh per clone (spec: clones of one snapshot must not share secrets). */
export function freshSecrets(): BoxSecrets {
  return {
    machine_id: randomUUID().replaceAll("-", ""),
    seed: randomBytes(32).toString("hex"),
    db_password: randomBytes(18).toString("base64url"),
    encryption_key: randomBytes(32).toString("base64url"),
    admin_password: randomBytes(12).toString("base64url"),
  };
}

export function specFromPayload(p: BoxJobPayload, secrets: BoxSecrets): BoxSpec {
  return {
    template: p.template,
    templateVersion: p.templateVersion,
    vcpu: p.vcpu,
    memoryMb: p.memoryMb,
    diskGb: p.diskGb,
    env: p.env,
    owner: p.owner,
    sitePublic: p.sitePublic,
    publicWake: p.publicWake,
    repo: p.repo,
    githubUrl: p.githubUrl,
    gitAuthor: p.gitAuthor,
    secrets,
  };
}

/** The stored box with the payload's latest intent (env, size, sharing) and its address fields. */
export function boxRecord(
  deps: HandlerDeps,
  slug: string,
  ip: string,
  spec: BoxSpec,
  prev: StoredBox | null,
): Omit<StoredBox, "updatedAt"> {
  return {
    slug,
    desiredState: prev?.desiredState ?? "running",
    spec,
    ip,
    mac: macForIp(ip),
    tap: deps.config.networkMode === "tap" ? tapNameForIp(ip) : null,
    generation: prev?.generation ?? 0,
  };
}

/**
 * The VM spec for one boot/restore of a stored box. Every call is a new boot: it issues the
 * box a new metadata-service token (only its digest is stored), so the previous boot's
 * token stops working.
 */
export function vmSpec(deps: HandlerDeps, box: Omit<StoredBox, "updatedAt">, generation: number): VmSpec {
  const { publicScheme, publicPort, domain } = deps.config;
  const urls = boxUrls(box.slug, domain, publicScheme, publicPort);
  const net = {
    ip: box.ip,
    prefix: deps.ipPool.layout.prefix,
    gateway: deps.ipPool.gateway(),
    mac: box.mac,
  };
  let metadataToken = "";
  if (deps.config.metadata.enabled) {
    const issued = newMetadataToken();
    deps.boxes.setMetadataToken(box.slug, issued.sha256);
    metadataToken = issued.token;
  }
  return {
    slug: box.slug,
    template: box.spec.template,
    vcpu: box.spec.vcpu,
    memoryMb: box.spec.memoryMb,
    diskGb: box.spec.diskGb,
    net: { ...net, tap: box.tap },
    metadata: {
      slug: box.slug,
      site_url: urls.site,
      code_url: urls.code,
      env: box.spec.env,
      repo: box.spec.repo ?? "",
      github_url: guestGitHubUrl(deps.config, box.spec.githubUrl ?? DEFAULT_GITHUB_WEB_URL, net.gateway),
      ...(box.spec.gitAuthor ? { git_author: box.spec.gitAuthor } : {}),
      network: { ...net, dns: deps.config.dns },
      metadata_url: metadataUrl(deps.config, net.gateway),
      secrets: { ...box.spec.secrets, metadata_token: metadataToken },
      issued_at: deps.clock.now().getTime(),
      generation,
    },
  };
}

export function publishRunning(deps: HandlerDeps, slug: string, spec: BoxSpec, upstream: Upstream): void {
  deps.routes.set(slug, { state: "running", upstream, owner: spec.owner, sitePublic: spec.sitePublic });
}

/** Hibernated: an allowed request wakes it (the edge's decide.ts). */
export function publishHibernated(deps: HandlerDeps, slug: string, spec: BoxSpec): void {
  deps.routes.set(slug, {
    state: "hibernated",
    upstream: () => null,
    owner: spec.owner,
    sitePublic: spec.sitePublic,
    publicWake: spec.publicWake ?? false,
  });
}

export function publishStopped(deps: HandlerDeps, slug: string, spec: BoxSpec): void {
  deps.routes.set(slug, {
    state: "stopped",
    upstream: () => null,
    owner: spec.owner,
    sitePublic: spec.sitePublic,
  });
}

import { createHash } from "node:crypto";
import { ACCESS_COOKIE } from "./access.ts";
import { ASK_PATH, CHECK_PATH } from "./plugin.ts";

/**
 * The ONE Caddy config of a host. It does not mention any box: every box request is first
 * sent to the agent (forward-auth on loopback), which answers with the upstream in
 * X-Doppio-Upstream, and the proxy dials that header per request. Box churn therefore
 * never changes Caddy's config, because Caddy 2.6.2 closes every proxied WebSocket on the
 * host on any config change.
 */

type EdgeTls =
  /** Local/test: plain HTTP on one port, automatic HTTPS off. */
  | { mode: "http"; listen: string }
  /** Production: HTTPS; wildcard certs by DNS-01 when a Cloudflare token is set, else on-demand. */
  | {
      mode: "https";
      cloudflareApiToken?: string;
      acmeEmail?: string;
      /** ACME directory (staging in pre-prod); Let's Encrypt production when unset. */
      acmeCa?: string;
      httpPort?: number;
      httpsPort?: number;
    };

export interface EdgeConfigOptions {
  domain: string;
  /** Caddy admin listen address; must stay the same across loads or the agent loses Caddy. */
  adminListen: string;
  /** Loopback host:port of the agent HTTP API that serves /edge/check and /tls/ask. */
  agentDial: string;
  tls: EdgeTls;
  /**
   * The Frappe site name inside the guest, for socket.io's site/origin checks. Defaults to
   * the public host name (Caddy placeholder), i.e. sites named after their public URL.
   */
  frappeSiteName?: string;
  /** Certificate storage directory (Caddy's default data dir when unset). */
  storageDir?: string;
}

const SERVER_NAME = "doppio";
const FINGERPRINT_PREFIX = "doppio-edge-";
const UPSTREAM = "X-Doppio-Upstream";
type Json = Record<string, unknown>;

export function buildEdgeConfig(opts: EdgeConfigOptions): Json {
  const t = tlsConfig(opts);
  const server: Json = { listen: t.listen, routes: edgeRoutes(opts), automatic_https: t.automaticHttps };
  if (t.tlsConnectionPolicies) server.tls_connection_policies = t.tlsConnectionPolicies;
  const http: Json = { servers: { [SERVER_NAME]: server } };
  if (opts.tls.mode === "https") {
    if (opts.tls.httpPort) http.http_port = opts.tls.httpPort;
    if (opts.tls.httpsPort) http.https_port = opts.tls.httpsPort;
  }
  const apps: Json = { http };
  if (t.tls) apps.tls = t.tls;
  const config: Json = { admin: { listen: opts.adminListen, config: { persist: false } }, apps };
  if (opts.storageDir) config.storage = { module: "file_system", root: opts.storageDir };
  // The fingerprint rides in an @id so an operator can see which build of the config is live.
  (edgeRoutesOf(config)[0] as Json)["@id"] = `${FINGERPRINT_PREFIX}${fingerprint(config)}`;
  return config;
}

/** sha256 over canonical JSON (sorted keys), first 16 hex chars. */
function fingerprint(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value)).digest("hex").slice(0, 16);
}

export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Json)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export interface TlsPieces {
  listen: string[];
  automaticHttps: Json;
  tlsConnectionPolicies?: Json[];
  tls?: Json;
}

export function tlsConfig(opts: EdgeConfigOptions): TlsPieces {
  const tls = opts.tls;
  if (tls.mode === "http") return { listen: [tls.listen], automaticHttps: { disable: true } };

  const wildcards = [`*.site.${opts.domain}`, `*.code.${opts.domain}`];
  const acme = (challenges?: Json): Json => ({
    module: "acme",
    ...(tls.acmeCa ? { ca: tls.acmeCa } : {}),
    ...(tls.acmeEmail ? { email: tls.acmeEmail } : {}),
    ...(challenges ? { challenges } : {}),
  });
  const onDemandPolicy = { on_demand: true, issuers: [acme()] };
  const onDemand = { ask: `http://${opts.agentDial}${ASK_PATH}` };
  const listen = [`:${tls.httpsPort ?? 443}`];

  if (tls.cloudflareApiToken) {
    // One wildcard cert per zone covers every box and every dev port (one DNS label deep),
    // so box churn never hits ACME rate limits. On-demand stays as a fallback if DNS-01
    // fails; the ask endpoint still restricts it to this host's boxes.
    const dns = { dns: { provider: { name: "cloudflare", api_token: tls.cloudflareApiToken } } };
    return {
      listen,
      automaticHttps: {},
      tlsConnectionPolicies: [{}],
      tls: {
        automation: {
          policies: [{ subjects: wildcards, issuers: [acme(dns)] }, onDemandPolicy],
          on_demand: onDemand,
        },
      },
    };
  }
  // No DNS token: certificates per host name at first handshake, only for names /tls/ask
  // approves. The wildcard host matchers must not make Caddy try (and fail) to obtain
  // wildcard certs up front over HTTP/TLS-ALPN, hence skip_certificates.
  return {
    listen,
    automaticHttps: { skip_certificates: wildcards },
    tlsConnectionPolicies: [{}],
    tls: { automation: { policies: [onDemandPolicy], on_demand: onDemand } },
  };
}

function edgeRoutes(opts: EdgeConfigOptions): Json[] {
  const site = `*.site.${opts.domain}`;
  const code = `*.code.${opts.domain}`;
  const siteName = opts.frappeSiteName ?? "{http.request.host}";
  return [
    // Every request: drop client-supplied X-Doppio-* (they must not pick an upstream),
    // then ask the agent. Non-2xx answers go to the client as they are.
    { handle: [{ handler: "headers", request: { delete: [UPSTREAM] } }, forwardAuth(opts.agentDial)] },
    {
      match: [{ host: [site], path: ["/socket.io", "/socket.io/*"] }],
      handle: [
        proxy({
          "X-Frappe-Site-Name": [siteName],
          Host: [siteName],
          Origin: [`{http.request.scheme}://${siteName}`],
        }),
      ],
      terminal: true,
    },
    { match: [{ host: [site] }], handle: [gzip(), proxy()], terminal: true },
    {
      // Dev ports: the dev server believes it is served at http://localhost/, so asset
      // paths and HMR sockets work without any base-path configuration.
      match: [{ host: [code], header_regexp: { Host: { name: "devport", pattern: "^[0-9]+-" } } }],
      handle: [proxy({ Host: ["localhost"] })],
      terminal: true,
    },
    {
      // VS Code's server hands a compressed socket to its extension host by replaying the
      // socket's inflate history; in CI that failed with a zlib error from VS Code's socket
      // layer, shown in the workbench as "An unknown error occurred". With no WebSocket
      // extension offered its sockets stay uncompressed; HTTP responses are still gzipped.
      match: [{ host: [code] }],
      handle: [gzip(), proxy(undefined, ["Sec-WebSocket-Extensions"])],
      terminal: true,
    },
    // Unreachable while the agent answers 404 for unknown hosts; kept so a bug there can
    // never turn into an empty 200 (Caddy's default for unmatched requests).
    {
      handle: [
        {
          handler: "static_response",
          status_code: 404,
          headers: { "Content-Type": ["text/plain; charset=utf-8"] },
          body: "no such box\n",
        },
      ],
    },
  ];
}

function forwardAuth(agentDial: string): Json {
  return {
    handler: "reverse_proxy",
    upstreams: [{ dial: agentDial }],
    rewrite: { method: "GET", uri: CHECK_PATH },
    headers: {
      request: {
        set: {
          "X-Forwarded-Method": ["{http.request.method}"],
          "X-Forwarded-Uri": ["{http.request.uri}"],
          "X-Forwarded-Host": ["{http.request.host}"],
          "X-Forwarded-Proto": ["{http.request.scheme}"],
        },
      },
    },
    handle_response: [
      {
        match: { status_code: [2] },
        routes: [
          {
            handle: [
              {
                handler: "headers",
                request: { set: { [UPSTREAM]: [`{http.reverse_proxy.header.${UPSTREAM}}`] } },
              },
            ],
          },
        ],
      },
    ],
  };
}

function proxy(set?: Record<string, string[]>, drop: string[] = []): Json {
  const request: Json = {
    delete: [UPSTREAM, ...drop],
    // The access cookie is for the edge only; never hand it to code running in the box.
    replace: { Cookie: [{ search_regexp: `(^|;\\s*)${ACCESS_COOKIE}=[^;]*`, replace: "" }] },
  };
  if (set) request.set = set;
  return {
    handler: "reverse_proxy",
    upstreams: [{ dial: `{http.request.header.${UPSTREAM}}` }],
    headers: { request },
  };
}

function gzip(): Json {
  return { handler: "encode", encodings: { gzip: {} }, prefer: ["gzip"] };
}

function edgeRoutesOf(config: Json): Json[] {
  const apps = config.apps as { http: { servers: Record<string, { routes: Json[] }> } };
  return apps.http.servers[SERVER_NAME]!.routes;
}

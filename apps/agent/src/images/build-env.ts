/**
 * The environment an image recipe (and every chroot it enters) runs with: an explicit
 * allow-list, never the agent's own environment. The agent holds its server token, its API
 * token and whatever its unit file adds; a recipe runs third-party code (package scripts,
 * npm postinstalls, pip builds) whose output ships inside every box of the template.
 */

/** What the recipes need from the host: basics, proxies, and their own documented knobs. */
const ALLOWED = new Set([
  "PATH",
  "HOME",
  "LANG",
  "LC_ALL",
  "TZ",
  "TMPDIR",
  // Egress through an operator's proxy (apt, npm, pip, git and curl all read these).
  "http_proxy",
  "https_proxy",
  "no_proxy",
  "all_proxy",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "NO_PROXY",
  "ALL_PROXY",
  // npm's cache and registry (a mirror); never its auth settings.
  "npm_config_cache",
  "npm_config_registry",
  "NPM_CONFIG_CACHE",
  "NPM_CONFIG_REGISTRY",
  // Read by images/common/build-debian.sh, scripts/build-image.sh and images/*/recipe.sh.
  "DOPPIO_IMAGE_CACHE",
  "DOPPIO_DEB_CACHE",
  "CODE_SERVER_VERSION",
  "NODE_BIN",
  "YARN_VERSION",
  "FRAPPE_BRANCH",
  "FRAPPE_SITE",
  "FRAPPE_PYPI_INDEX",
  "FRAPPE_GIT_URL",
  "FRAPPE_PYTHON",
]);

const DEFAULTS: Record<string, string> = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  LANG: "C.UTF-8",
};

/**
 * The allowed part of `from` (the agent's environment) plus `extra`, which the caller sets
 * on purpose (e.g. DOPPIO_IMAGE_CACHE from the agent's config) and which wins.
 */
export function buildEnv(
  from: NodeJS.ProcessEnv,
  extra: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = { ...DEFAULTS };
  for (const [k, v] of Object.entries(from)) if (ALLOWED.has(k) && v !== undefined) env[k] = v;
  return { ...env, ...extra };
}

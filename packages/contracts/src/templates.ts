import type { BoxSizeName } from "./box.ts";

/**
 * A box template: what users pick (the control plane's catalog) and what a host needs to
 * build, boot and check it (the agent's image builder, config defaults and readiness).
 */
export interface TemplateDescriptor {
  name: string;
  /** Catalog title and description users see. */
  title: string;
  description: string;
  /** The control plane's template version; agents rebuild the golden when it moves. */
  version: string;
  /** Size a new box gets unless the request names one. */
  boxSize: BoxSizeName;
  /** The default template, the only one that may cold-boot without a golden snapshot. */
  isDefault: boolean;
  recipe: {
    /** `busybox`: scripts/build-image.sh; `debian`: images/common/build-debian.sh + images/<name>/recipe.sh. */
    kind: "busybox" | "debian";
    /** Repository-relative script that builds the image. */
    script: string;
  };
  /** Root disk size (mkfs.ext4 size syntax, e.g. 3G). */
  defaultSize: string;
  /** Guest ports the edge publishes; the first one that serves HTTP is the code URL. */
  ports: { site: number | null; code: number | null; ssh: number | null };
  /** Ports that must answer before the box counts as ready (forwarded in user mode). */
  readyPorts: number[];
  readiness: { kind: "http"; port: number; path: string } | { kind: "slug"; ports: number[] };
  /** Golden build VM size; clones keep it (a snapshot fixes memory and vCPUs). */
  memoryMb: number;
  vcpu: number;
  /** Outside hosts the recipe needs besides Debian's mirror and npm (fails fast without). */
  needsNetwork: string[];
}

/**
 * Every template, in one list the control plane (apps/api/src/services/templates.ts) and
 * the agent (apps/agent/src/images/, config.ts) both read. Recipes live in images/<name>/.
 */
export const TEMPLATES: readonly TemplateDescriptor[] = [
  {
    // busybox guest for runtime tests: httpd on :8000 and :8888. The default because every
    // host can build it without network access.
    name: "minimal",
    title: "Minimal",
    description: "A tiny Linux box answering on the site and code URLs; for trying the platform.",
    version: "1",
    boxSize: "small",
    isDefault: true,
    recipe: { kind: "busybox", script: "scripts/build-image.sh" },
    defaultSize: "512M",
    ports: { site: 8000, code: 8888, ssh: null },
    readyPorts: [8000, 8888],
    readiness: { kind: "slug", ports: [8000, 8888] },
    memoryMb: 256,
    vcpu: 1,
    needsNetwork: [],
  },
  {
    // Debian bookworm, git, Python 3, Node 20 and code-server on :8888 serving /workspace.
    name: "code",
    title: "VS Code",
    description: "Debian with git, Node, Python and VS Code in the browser.",
    version: "1",
    boxSize: "medium",
    isDefault: false,
    recipe: { kind: "debian", script: "images/common/build-debian.sh" },
    defaultSize: "3G",
    ports: { site: null, code: 8888, ssh: 22 },
    readyPorts: [8888],
    readiness: { kind: "http", port: 8888, path: "/healthz" },
    memoryMb: 1536,
    vcpu: 2,
    needsNetwork: [],
  },
  {
    // Frappe bench (version-16 by default) with MariaDB, Redis, Node + yarn and code-server.
    name: "frappe",
    title: "Frappe bench",
    description: "Frappe v16 bench with a running site, MariaDB, Redis and VS Code in the browser.",
    version: "1",
    boxSize: "medium",
    isDefault: false,
    recipe: { kind: "debian", script: "images/common/build-debian.sh" },
    defaultSize: "12G",
    ports: { site: 8000, code: 8888, ssh: 22 },
    readyPorts: [8000, 8888],
    readiness: { kind: "http", port: 8000, path: "/api/method/ping" },
    memoryMb: 4096,
    vcpu: 2,
    needsNetwork: ["https://pypi.org/simple/frappe-bench/", "https://github.com/frappe/frappe"],
  },
];

export function findTemplate(name: string): TemplateDescriptor | undefined {
  return TEMPLATES.find((t) => t.name === name);
}

/** The template hosts offer and users get when they name none. */
export const DEFAULT_TEMPLATE = TEMPLATES.find((t) => t.isDefault)!.name;

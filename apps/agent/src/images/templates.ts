/**
 * Box templates as data: what users pick. The recipe is a script run on the host; the
 * readiness check is what the guest's init waits for before it reports DOPPIO-READY.
 */
export interface TemplateDescriptor {
  name: string;
  description: string;
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

export const TEMPLATES: readonly TemplateDescriptor[] = [
  {
    name: "minimal",
    description: "busybox guest for runtime tests: httpd on :8000 and :8888",
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
    name: "code",
    description: "Debian bookworm, git, Python 3, Node 20 and code-server on :8888 serving /workspace",
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
    name: "frappe",
    description: "Frappe bench (version-16 by default) with MariaDB, Redis, Node + yarn and code-server",
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

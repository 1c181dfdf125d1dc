/** Query keys in one place, so the live event stream updates the same cache entries the pages read. */
export const keys = {
  me: ["me"] as const,
  boxes: ["boxes"] as const,
  box: (slug: string) => ["box", slug] as const,
  jobs: (slug: string) => ["jobs", slug] as const,
  templates: ["templates"] as const,
  tokens: ["tokens"] as const,
  servers: ["servers"] as const,
  wallet: ["wallet"] as const,
  ledger: (kind: string) => ["ledger", kind] as const,
  invoices: ["invoices"] as const,
  topUps: ["topups"] as const,
  github: ["github"] as const,
  plays: (server: string) => ["plays", server] as const,
  serverSsh: (server: string) => ["server-ssh", server] as const,
  sshKey: ["ssh-key"] as const,
};

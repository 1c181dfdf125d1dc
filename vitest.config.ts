import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts"],
    // Passwords are hashed at scrypt N=2^14 here (passwordScryptN; every control plane a test
    // starts, in process or spawned, reads it), not at the production 2^17: the suite makes
    // hundreds of accounts, and at 2^17 each hash takes 128 MiB and ~0.4 s of a core.
    // secrets.test.ts checks the production cost on control planes of its own.
    env: { DOPPIO_PASSWORD_SCRYPT_N: String(1 << 14) },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Suites start real servers (Postgres, Caddy, QEMU); keep workers low on 2 cores.
    maxWorkers: 2,
    reporters: ["default"],
  },
});

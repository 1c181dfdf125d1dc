import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts", "apps/*/test/**/*.test.ts"],
    // Control-plane tests hash passwords with scrypt N=2^17; a loaded 2-core host needs the room.
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Suites start real servers (Postgres, Caddy, QEMU); keep workers low on 2 cores.
    maxWorkers: 2,
    reporters: ["default"],
  },
});

import { createSecretKey, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateEd25519, mint } from "@doppio/access-token";
import { afterAll, describe, expect, it } from "vitest";
import { EdgeAccess } from "../../src/edge/access.ts";
import { type DecideDeps, decide, type EdgeRequest } from "../../src/edge/decide.ts";
import { MemoryRouteTable } from "../../src/edge/routes.ts";
import { openStore } from "../../src/store/db.ts";
import { EdgeAccessStore } from "../../src/store/edge-access.ts";

const D = "doppio.test";
const NOW = Date.UTC(2026, 5, 1);
const cp = generateEd25519();
const dataDir = mkdtempSync(join(tmpdir(), "doppio-decide-"));
const db = openStore(dataDir);
afterAll(() => {
  db.close();
  rmSync(dataDir, { recursive: true, force: true });
});
const routes = new MemoryRouteTable();
routes.set("alpha", { state: "running", upstream: (p) => `10.0.0.2:${p}`, owner: "u1", sitePublic: true });
routes.set("cold", { state: "stopped", upstream: () => null, owner: "u1", sitePublic: false });
const deps: DecideDeps = {
  domain: D,
  routes,
  access: new EdgeAccess({
    controlPlaneKey: cp.publicKey,
    cookieKey: createSecretKey(randomBytes(32)),
    now: () => NOW,
    ledger: new EdgeAccessStore(db),
  }),
};
const req = (host: string, uri: string, extra: Partial<EdgeRequest> = {}): EdgeRequest => ({
  host,
  uri,
  method: "GET",
  https: false,
  cookie: undefined,
  accept: undefined,
  ...extra,
});

describe("decide", () => {
  it("picks the guest port from host and path", () => {
    expect(decide(req(`alpha.site.${D}`, "/app"), deps)).toMatchObject({
      kind: "pass",
      upstream: "10.0.0.2:8000",
    });
    expect(decide(req(`alpha.site.${D}`, "/socket.io/?EIO=4"), deps)).toMatchObject({
      upstream: "10.0.0.2:9000",
    });
    expect(decide(req(`alpha.site.${D}`, "/socket.io"), deps)).toMatchObject({ upstream: "10.0.0.2:9000" });
  });

  it("over HTTPS the cookie is Secure; over plain HTTP it cannot be", () => {
    const token = () =>
      mint(cp.privateKey, { sub: "alpha", usr: "u1", aud: "code", hst: "code", sid: "s" }, 60, NOW);
    const secure = decide(req(`alpha.code.${D}`, `/__doppio/auth?token=${token()}`, { https: true }), deps);
    expect(secure).toMatchObject({ kind: "redirect", location: "/" });
    expect((secure as { setCookie: string }).setCookie).toMatch(/; HttpOnly; SameSite=Lax; Secure$/);
    const plain = decide(req(`alpha.code.${D}`, `/__doppio/auth?token=${token()}`), deps);
    expect((plain as { setCookie: string }).setCookie).not.toContain("Secure");
    expect((plain as { setCookie: string }).setCookie).toContain("Max-Age=43200");
  });

  it("a stranger learns nothing about a private box's state; its owner sees 'stopped'", () => {
    expect(decide(req(`cold.site.${D}`, "/"), deps)).toMatchObject({ kind: "page", reason: "sign_in" });
    const token = mint(
      cp.privateKey,
      { sub: "cold", usr: "u1", aud: "site", hst: "site", sid: "s" },
      60,
      NOW,
    );
    const signedIn = decide(req(`cold.site.${D}`, `/__doppio/auth?token=${token}`), deps) as {
      setCookie: string;
    };
    const cookie = signedIn.setCookie.split(";")[0];
    expect(decide(req(`cold.site.${D}`, "/", { cookie }), deps)).toMatchObject({
      kind: "page",
      reason: "stopped",
    });
  });
});

import { publicKeyFromPem, verify } from "@doppio/access-token";
import { expect, it } from "vitest";
import { heartbeat, registerServer, signedInClient, TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

describeOnEachDb("private box URLs", (env) => {
  it("hands the owner a short-lived token the agent can verify, and nobody else", async () => {
    const owner = await signedInClient(env().url, "owner");
    const agent = await registerServer(owner, "acc-host", { publicScheme: "http", publicPort: 8088 });
    const hb = await agent.post("/agent/v1/heartbeat", heartbeat());
    const publicKey = publicKeyFromPem(hb.body.accessPublicKey);
    await owner.post("/api/v1/boxes", { template: "minimal", name: "mine" });
    const me = (await owner.get("/api/v1/me")).body;

    const host = "mine.code.acc-host.example.test:8088";
    const res = await fetch(
      `${env().url}/api/v1/access/open?${new URLSearchParams({ host, next: "/?folder=/work" })}`,
      {
        headers: {
          authorization: `Bearer ${(await owner.post("/api/v1/tokens", { name: "t" })).body.token}`,
        },
        redirect: "manual",
      },
    );
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get("location")!);
    expect(location.origin).toBe("http://mine.code.acc-host.example.test:8088");
    expect(location.pathname).toBe("/__doppio/auth");
    expect(location.searchParams.get("next")).toBe("/?folder=/work");
    const verdict = verify(publicKey, location.searchParams.get("token")!, Date.now(), {
      sub: "mine",
      usr: me.id,
      aud: "code",
    });
    expect(verdict.ok).toBe(true);
    if (verdict.ok) expect(verdict.claims.exp * 1000 - Date.now()).toBeLessThanOrEqual(60_000);

    const dev = await owner.get(
      `/api/v1/access/open?host=${encodeURIComponent("5173-mine.code.acc-host.example.test")}`,
    );
    expect(dev.status).toBe(302);

    const stranger = await signedInClient(env().url, "stranger");
    const denied = await stranger.get(`/api/v1/access/open?host=${encodeURIComponent(host)}`);
    expect(denied.status).toBe(404);
    const nobox = await owner.get(
      `/api/v1/access/open?host=${encodeURIComponent("nope.code.acc-host.example.test")}`,
    );
    expect(nobox.status).toBe(404);
    const open = await owner.get(
      `/api/v1/access/open?host=${encodeURIComponent(host)}&next=${encodeURIComponent("//evil.example")}`,
    );
    expect(new URL(open.headers.get("location")!).searchParams.get("next")).toBe("/");

    const anon = await new TestClient(env().url).get(`/api/v1/access/open?host=${encodeURIComponent(host)}`);
    expect(anon.status).toBe(302);
    expect(anon.headers.get("location")).toMatch(/^\/dashboard\/login\?next=%2Fapi%2Fv1%2Faccess%2Fopen/);
  });
});

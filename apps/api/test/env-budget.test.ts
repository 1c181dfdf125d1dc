import { ENV_MAX_BYTES, ENV_VALUE_MAX, envBytes } from "@doppio/contracts";
import { expect, it } from "vitest";
import { freshSecrets } from "../../agent/src/jobs/handlers/common.ts";
import { newMetadataToken } from "../../agent/src/metadata/tokens.ts";
import type { BoxMetadata } from "../../agent/src/vmm/executor.ts";
import { encodeMetadata } from "../../agent/src/vmm/qemu/metadata.ts";
import { heartbeat, registerServer, signedInClient, type TestClient } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

/**
 * The agent pads a box's metadata to a fixed size and refuses a box whose metadata does not
 * fit, so every env the control plane accepts must fit, next to the largest everything-else
 * a box can have: the longest slug, a 200-character domain with a port, the agent's real
 * secrets and token, and a few DNS servers.
 */
function worstCaseMetadata(env: Record<string, string>): BoxMetadata {
  const slug = `a${"b".repeat(38)}c`;
  const domain = `${"d".repeat(60)}.${"e".repeat(60)}.${"f".repeat(60)}.example`;
  return {
    slug,
    site_url: `https://${slug}.site.${domain}:65535`,
    code_url: `https://${slug}.code.${domain}:65535`,
    env,
    network: {
      ip: "255.255.255.254",
      prefix: 16,
      gateway: "255.255.255.255",
      mac: "06:00:ff:ff:ff:fe",
      dns: ["1.1.1.1", "9.9.9.9", "2606:4700:4700::1111", "2620:fe::fe"],
    },
    metadata_url: "http://255.255.255.255:65535",
    secrets: { ...freshSecrets(), metadata_token: newMetadataToken().token },
    issued_at: Date.now(),
    generation: Number.MAX_SAFE_INTEGER,
  };
}

/** Values of `unit` repeated, split over variables, topped up with ASCII to exactly `bytes`. */
function envOf(bytes: number, unit: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (let i = 0; envBytes(env) < bytes; i++) {
    const name = `VAR_${i}`;
    env[name] = "";
    let value = "";
    while (value.length + unit.length <= ENV_VALUE_MAX && envBytes({ ...env, [name]: value + unit }) <= bytes)
      value += unit;
    while (value.length < ENV_VALUE_MAX && envBytes({ ...env, [name]: `${value}x` }) <= bytes) value += "x";
    env[name] = value;
    if (envBytes(env) === bytes || value === "") break;
  }
  return env;
}

/** Every kind of character costs differently in the blob: ASCII, JSON escapes, 2-, 3- and 4-byte UTF-8. */
const UNITS = ["a", '"', "\u0001", "é", "€", "😀"];

describeOnEachDb("env budget", (env) => {
  let user: TestClient;
  const patch = (e: Record<string, string>) => user.request("PATCH", "/api/v1/boxes/env-box", { env: e });

  it("fits every env the API accepts into the agent's metadata, and the whole budget is usable", async () => {
    user = await signedInClient(env().url, "env");
    const agent = await registerServer(await env().admin(), "fc-env");
    await agent.post("/agent/v1/heartbeat", heartbeat());
    expect((await user.post("/api/v1/boxes", { template: "minimal", name: "env-box" })).status).toBe(202);

    // What the API used to accept: 15 values of 4000 characters (60 KB, under the body limit).
    const old = Object.fromEntries(Array.from({ length: 15 }, (_, i) => [`OLD_${i}`, "o".repeat(4000)]));
    const candidates = [old, ...UNITS.flatMap((u) => [envOf(ENV_MAX_BYTES, u), envOf(ENV_MAX_BYTES + 1, u)])];
    const accepted: number[] = [];
    for (const candidate of candidates) {
      const res = await patch(candidate);
      expect([200, 400]).toContain(res.status);
      if (res.status !== 200) {
        expect(res.body.error.code).toBe("validation_failed");
        continue;
      }
      accepted.push(envBytes(candidate));
      // What the agent gets is what the box stores: encode exactly that.
      const stored = (await user.get("/api/v1/boxes/env-box")).body.env;
      expect(stored).toEqual(candidate);
      expect(() => encodeMetadata(worstCaseMetadata(stored))).not.toThrow();
    }
    // Each kind of character can use the budget to the byte, and no byte more.
    expect(accepted).toEqual(UNITS.map(() => ENV_MAX_BYTES));
  });

  it("says how large an env may be when it is too large", async () => {
    const res = await patch(envOf(ENV_MAX_BYTES + 1, "a"));
    expect(res.status).toBe(400);
    expect(JSON.stringify(res.body.error.details)).toContain(`at most ${ENV_MAX_BYTES} bytes`);
    const create = await user.post("/api/v1/boxes", {
      template: "minimal",
      env: envOf(ENV_MAX_BYTES + 1, "€"),
    });
    expect(create.status).toBe(400);
    // Postgres stores neither in jsonb (these were a 500).
    for (const value of ["a\u0000b", "\ud800", "x\udfff"]) {
      const res = await patch({ V: value });
      expect([res.status, res.body.error.code]).toEqual([400, "validation_failed"]);
    }
  });
});

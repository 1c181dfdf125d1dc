import { expect, it } from "vitest";
import { heartbeat, registerServer } from "./support/client.ts";
import { describeOnEachDb } from "./support/each-db.ts";

// Placement counts what each server has free; creates arriving together must count in turn
// (the placement lock), or two of them take the same last slot.
describeOnEachDb("placement under concurrent creates", (env) => {
  it("fills a server exactly: of 8 creates at once for 3 slots, 3 are placed and 5 answered no_capacity", async () => {
    const admin = await env().admin();
    const agent = await registerServer(admin, "tight-01", {
      capacity: { vcpu: 3, memoryMb: 3 * 2048, diskGb: 3 * 10 },
    });
    expect((await agent.post("/agent/v1/heartbeat", heartbeat())).status).toBe(200);
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        admin.post("/api/v1/boxes", { template: "minimal", name: `race-${i}`, size: "small" }),
      ),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([202, 202, 202, 503, 503, 503, 503, 503]);
    for (const a of answers.filter((x) => x.status === 503)) {
      expect(a.body.error.details.reasons).toEqual(["tight-01: not enough vcpu"]);
    }
    const server = (await admin.get("/api/v1/servers/tight-01")).body;
    expect(server.used).toMatchObject({ vcpu: 3, memoryMb: 6144, diskGb: 30 });
  });
});

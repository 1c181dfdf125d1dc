import { JobSpec } from "@doppio/contracts";
import { describe, expect, it } from "vitest";
import { boxPayload } from "./support/agent-harness.ts";

/**
 * `repo` reaches the guest's shell (doppio-clone): the agent's parse of a job checks it again,
 * whatever the control plane sent.
 */
describe("a box job's repo", () => {
  const parse = (repo: unknown) =>
    JobSpec.safeParse({ action: "create", payload: { ...boxPayload("r"), repo } });

  it("is owner/name or null, and absent means null (jobs queued before it existed)", () => {
    expect(parse("octo/app-a").success).toBe(true);
    expect(parse(null).success).toBe(true);
    const { repo: _, ...old } = boxPayload("r");
    const parsed = JobSpec.parse({ action: "start", payload: old });
    expect(parsed.payload).toMatchObject({ repo: null });
  });

  it("refuses anything a shell or git could read as more than a name", () => {
    for (const bad of [
      "octo/x';touch /pwned;'",
      "octo/a b",
      "octo/a\nb",
      "octo/a/b",
      "-o/x",
      "octo/..",
      "octo/--upload-pack=x",
      "octo",
      "",
      "x".repeat(200),
      42,
    ]) {
      expect(parse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });
});

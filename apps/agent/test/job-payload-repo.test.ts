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

/**
 * `githubUrl` reaches the guest's shell and gitconfig (apply, git-credential-doppio,
 * doppio-clone): the agent's parse checks it again, and a job from before it existed gets github.com.
 */
describe("a box job's GitHub URL", () => {
  const parse = (githubUrl: unknown) =>
    JobSpec.safeParse({ action: "create", payload: { ...boxPayload("r"), githubUrl } });

  it("is http(s)://host[:port]; absent means https://github.com", () => {
    expect(parse("https://ghe.example.com").success).toBe(true);
    expect(parse("http://10.0.0.1:8080").success).toBe(true);
    const { githubUrl: _, ...old } = boxPayload("r");
    expect(JobSpec.parse({ action: "start", payload: old }).payload).toMatchObject({
      githubUrl: "https://github.com",
    });
  });

  it("refuses anything a shell, gitconfig or git's credential protocol could read as more", () => {
    for (const bad of [
      'https://x"]\n\thelper = !sh -c id',
      "https://x\nhost=evil.example",
      "https://ghe.example.com/",
      "https://ghe.example.com/path",
      "https://u@ghe.example.com",
      "https://ghe.example.com:0",
      "https://ghe.example.com:99999",
      "https://GHE.example.com",
      "https://$(id).example.com",
      "file:///etc",
      "",
      `https://${"a".repeat(300)}.com`,
      42,
    ]) {
      expect(parse(bad).success, JSON.stringify(bad)).toBe(false);
    }
  });
});

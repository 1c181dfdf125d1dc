import { describe, expect, it } from "vitest";
import {
  allowedActions,
  BOX_STATUSES,
  boxUrls,
  canPerform,
  generateSlug,
  SLUG_MAX,
  slugProblem,
} from "../src/index.ts";

describe("box action rules", () => {
  it("allows stop and reset only from states where the VM exists", () => {
    expect(canPerform("running", "stop")).toBe(true);
    expect(canPerform("stopped", "stop")).toBe(false);
    expect(canPerform("stopped", "start")).toBe(true);
    expect(canPerform("running", "start")).toBe(false);
    expect(canPerform("creating", "reset")).toBe(false);
  });

  it("always lets a live box be deleted, and a deleted box or one on a silent host do nothing", () => {
    for (const status of BOX_STATUSES) {
      // "unknown": its host stopped heartbeating and holds its disks; nothing can run there.
      if (status === "deleting" || status === "deleted" || status === "unknown") {
        expect(allowedActions(status)).toEqual([]);
      } else expect(canPerform(status, "delete")).toBe(true);
    }
  });

  it("lets a box in error be retried every way", () => {
    expect(allowedActions("error")).toEqual(["start", "stop", "reset", "delete"]);
  });
});

describe("slugs", () => {
  it.each(["abc", "my-box-1", "a1b", "x".repeat(SLUG_MAX)])("accepts %s", (slug) => {
    expect(slugProblem(slug)).toBeNull();
  });

  it.each([
    "a;rm -rf /",
    "../x",
    "x".repeat(300),
    "bôx",
    "Box",
    "-ab",
    "ab-",
    "a--b",
    "1ab",
    "ab",
    "",
    "a b",
  ])("rejects %j", (slug) => {
    expect(slugProblem(slug)).not.toBeNull();
  });

  it("keeps the longest dev-port hostname label within DNS's 63 characters", () => {
    const label = `65535-${"x".repeat(SLUG_MAX)}`;
    expect(label.length).toBeLessThanOrEqual(63);
  });

  it("generates slugs that pass its own rules", () => {
    let seed = 1;
    const random = () => {
      seed = (seed * 16807) % 2147483647;
      return (seed - 1) / 2147483646;
    };
    for (let i = 0; i < 200; i++) expect(slugProblem(generateSlug(random))).toBeNull();
  });
});

describe("box URLs", () => {
  it("derives site, code and dev-port URLs from slug and server domain", () => {
    expect(boxUrls("demo", "fc-01.example.com")).toEqual({
      site: "https://demo.site.fc-01.example.com",
      code: "https://demo.code.fc-01.example.com",
      devPort: "https://{port}-demo.code.fc-01.example.com",
    });
  });

  it("adds a non-default port", () => {
    expect(boxUrls("demo", "localhost", "http", 8088).site).toBe("http://demo.site.localhost:8088");
    expect(boxUrls("demo", "localhost", "http", 80).site).toBe("http://demo.site.localhost");
  });
});

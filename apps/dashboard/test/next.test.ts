import { describe, expect, it } from "vitest";
import { safeNext } from "../src/lib/next.ts";

const ORIGIN = "https://boxes.example.com";

describe("safeNext: where login may send the user", () => {
  it("keeps dashboard pages and the box hand-off, as parsed paths", () => {
    expect(safeNext("/dashboard", ORIGIN)).toBe("/dashboard");
    expect(safeNext("/dashboard/", ORIGIN)).toBe("/dashboard/");
    expect(safeNext("/dashboard/boxes/demo?tab=logs#end", ORIGIN)).toBe("/dashboard/boxes/demo?tab=logs#end");
    expect(safeNext("/api/v1/access/open?host=demo.code.fc.example.test&next=%2F", ORIGIN)).toBe(
      "/api/v1/access/open?host=demo.code.fc.example.test&next=%2F",
    );
  });

  it.each([
    null,
    "",
    "dashboard",
    "https://evil.example/dashboard/",
    "http:/evil.example",
    "javascript:alert(1)",
    "//evil.example/dashboard/",
    "/\\evil.example/dashboard/",
    "\\\\evil.example",
    "/\t/evil.example/dashboard/",
    "/\n/evil.example",
    "/\r\n/evil.example",
    " //evil.example",
    "%2F%2Fevil.example",
    "/%2F%2Fevil.example",
    "/%5Cevil.example",
    "/dashboard/../api/v1/auth/logout",
    "/dashboard/%2e%2e/metrics",
    "/api/v1/access/open/../../../metrics",
    "/dashboard@evil.example",
    "/dashboardx",
    "/metrics",
    "/api/v1/auth/logout",
  ])("refuses %j", (next) => {
    expect(safeNext(next, ORIGIN)).toBeNull();
  });
});

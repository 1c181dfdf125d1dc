import { describe, expect, it } from "vitest";
import { type Route, routes, routeUrl } from "../src/index.ts";

describe("route contract", () => {
  it("names every path parameter in the route's params schema, and nothing else", () => {
    for (const [name, route] of Object.entries(routes) as [string, Route][]) {
      const inPath = [...route.path.matchAll(/:([A-Za-z]+)/g)].map((m) => m[1]).sort();
      const shape = (route.params as { shape?: Record<string, unknown> } | undefined)?.shape ?? {};
      expect(Object.keys(shape).sort(), name).toEqual(inPath);
    }
  });

  it("gives every route either JSON answers or an event stream, never both", () => {
    for (const [name, route] of Object.entries(routes) as [string, Route][]) {
      const answers = Object.keys(route.responses).length;
      expect(answers > 0 !== (route.events !== undefined), name).toBe(true);
    }
  });

  it("fills path parameters URL-encoded and keeps only the query fields that are set", () => {
    expect(routeUrl(routes.getBox, { params: { slug: "a b/c" } })).toBe("/api/v1/boxes/a%20b%2Fc");
    expect(
      routeUrl(routes.getBoxLogs, {
        params: { slug: "x" },
        query: { after: 5, tail: undefined, source: "bench" },
      }),
    ).toBe("/api/v1/boxes/x/logs?after=5&source=bench");
    expect(routeUrl(routes.listBoxes)).toBe("/api/v1/boxes");
    expect(() => routeUrl(routes.getBox, {})).toThrow(/no value for :slug/);
  });
});

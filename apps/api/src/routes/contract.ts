import type { Route } from "@doppio/contracts";
import { z } from "zod";

/**
 * Fastify's method, URL and schema for a route of the contract
 * (packages/contracts/src/routes.ts), so a handler validates and serializes with exactly
 * what the clients parse. Spread into `app.route({...endpoint(routes.x), onRequest, handler})`.
 */
export function endpoint<R extends Route>(route: R, doc: { tags: string[]; hide?: boolean }) {
  const response = route.events
    ? // A hijacked event stream: nothing is serialized, the content type is for the description.
      { 200: { description: "server-sent events", content: { "text/event-stream": { schema: z.string() } } } }
    : route.responses;
  return {
    method: route.method,
    url: route.path,
    schema: {
      ...doc,
      params: route.params as R["params"],
      querystring: route.query as R["query"],
      body: route.body as R["body"],
      response: response as R["responses"],
    },
  };
}

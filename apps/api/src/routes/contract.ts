import {
  ErrorBody,
  type RouteName,
  type Routes,
  routeErrors,
  routeSecurity,
  routes,
} from "@doppio/contracts";
import { jsonSchemaTransform } from "fastify-type-provider-zod";
import { z } from "zod";

/**
 * Fastify's method, URL and schema for a route of the contract
 * (packages/contracts/src/routes.ts), so a handler validates and serializes with exactly
 * what the clients parse, and /openapi.json describes it from the same facts: summary,
 * operationId (the contract's name), security, and each refusal in the one error shape.
 * Spread into `app.route({...endpoint("getBox"), onRequest, handler})`.
 */
export function endpoint<K extends RouteName>(name: K) {
  const route: Routes[K] = routes[name];
  const errors = Object.fromEntries(
    [...routeErrors(route)].map(([status, meaning]) => [status, ErrorBody.describe(meaning)]),
  );
  const success = route.events
    ? // A hijacked event stream: nothing is serialized; the content type is for the description.
      {
        200: {
          description: `Server-sent events: ${Object.keys(route.events)
            .map((e) => `\`${e}\``)
            .join(", ")}, each with a JSON \`data\`.`,
          content: { "text/event-stream": { schema: z.string() } },
        },
      }
    : Object.fromEntries(
        Object.entries(route.responses).map(([status, schema]) => [
          status,
          schema.describe(successMeaning(Number(status))),
        ]),
      );
  const schema = {
    operationId: name,
    summary: route.summary,
    tags: [route.tag],
    security: routeSecurity(route.auth),
    params: route.params as Routes[K]["params"],
    querystring: route.query as Routes[K]["query"],
    body: route.body as Routes[K]["body"],
    response: { ...success, ...errors } as Routes[K]["responses"],
  };
  // A key present but undefined makes Fastify warn that the schema is missing (FSTWRN001).
  for (const key of ["params", "querystring", "body"] as const) {
    if (schema[key] === undefined) delete schema[key];
  }
  return { method: route.method, url: route.path, schema };
}

function successMeaning(status: number): string {
  switch (status) {
    case 201:
      return "Created.";
    case 202:
      return "Accepted: the job is queued.";
    case 204:
      return "Done; no body.";
    case 302:
      return "Redirect (see `Location`).";
    default:
      return "OK.";
  }
}

type Transform = typeof jsonSchemaTransform;

/**
 * The zod-to-OpenAPI transform, except that answers without a body (204, redirects) get no
 * `content`: zod's `null` comes out as a nullable string, which the description would
 * otherwise promise as a JSON body.
 */
export const openApiTransform: Transform = (input) => {
  const out = jsonSchemaTransform(input);
  const response = (out.schema as { response?: Record<string, { description?: string }> } | undefined)
    ?.response;
  for (const [status, answer] of Object.entries(response ?? {})) {
    if (status === "204" || status.startsWith("3")) {
      response![status] = { type: "null", description: answer.description } as { description?: string };
    }
  }
  return out;
};

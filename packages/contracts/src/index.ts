export * from "./errors.ts";
export * from "./slug.ts";
export * from "./box.ts";
export * from "./job.ts";
export * from "./agent-protocol.ts";
export * from "./api.ts";

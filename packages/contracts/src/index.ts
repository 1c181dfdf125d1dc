export * from "./agent-protocol.ts";
export * from "./api.ts";
export * from "./box.ts";
export * from "./errors.ts";
export * from "./hosts.ts";
export * from "./job.ts";
export * from "./logs.ts";
export * from "./slug.ts";

// The one place the edge imports the token package. It points at the package source by
// relative path only until the workspace link for @doppio/access-token exists; then this
// becomes `from "@doppio/access-token"` (and apps/agent/package.json lists it).
export * from "../../../../packages/access-token/src/index.ts";

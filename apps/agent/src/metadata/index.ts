export { GitCredentialCache, REUSE_MARGIN_MS } from "./credentials.ts";
export { createMetadataListener, type MetadataListener } from "./listener.ts";
export { buildMetadataService, type MetadataServiceDeps } from "./service.ts";
export { metadataListenHost, metadataUrl, newMetadataToken, tokenSha256 } from "./tokens.ts";

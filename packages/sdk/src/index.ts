export { type CallOptions, type ClientOptions, DoppioClient, type StreamEvent } from "./client.ts";
export {
  ApiError,
  DoppioError,
  isTransient,
  NetworkError,
  StreamBrokenError,
  UnexpectedAnswerError,
} from "./errors.ts";
export {
  BoxFailedError,
  type FollowLogsOptions,
  followLogs,
  sleep,
  type WaitForBoxOptions,
  waitForBox,
} from "./follow.ts";
export { parseSse, type SseMessage } from "./sse.ts";

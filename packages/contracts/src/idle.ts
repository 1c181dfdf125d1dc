import { z } from "zod";

/**
 * Idle hibernation: a running box whose last activity (requests and open connections seen
 * by its host's edge, or a "keep awake") is older than its idle timeout is hibernated by
 * the control plane; a request to its URL wakes it (see the edge, apps/agent/src/edge/).
 * The timeout is the box's own when set, else its owner's default; 0 means never.
 */
export const IDLE_TIMEOUT_MAX_MINUTES = 7 * 24 * 60;
export const IdleTimeoutMinutes = z.number().int().min(0).max(IDLE_TIMEOUT_MAX_MINUTES);

/** The timeout that applies: the box's override, else the owner's default; null = never. */
export function effectiveIdleTimeout(boxOverride: number | null, userDefault: number | null): number | null {
  const minutes = boxOverride ?? userDefault;
  return minutes && minutes > 0 ? minutes : null;
}

/** When a running box hibernates if nothing happens before then; null when it never does. */
export function idleHibernatesAt(lastActiveAt: Date, timeoutMinutes: number | null): Date | null {
  return timeoutMinutes === null ? null : new Date(lastActiveAt.getTime() + timeoutMinutes * 60_000);
}

/** `PATCH /api/v1/boxes/:slug/idle`: the box's own timeout (null: the owner's default) and who may wake it. */
export const SetBoxIdleRequest = z.strictObject({
  idleTimeoutMinutes: IdleTimeoutMinutes.nullable(),
  /** Anyone's request to its public site may wake it (otherwise only the owner's). */
  publicWake: z.boolean().optional(),
});
export type SetBoxIdleRequest = z.infer<typeof SetBoxIdleRequest>;

/** `PATCH /api/v1/me/idle`: the signed-in user's default for boxes without their own (null: never). */
export const SetIdleDefaultRequest = z.strictObject({ idleTimeoutMinutes: IdleTimeoutMinutes.nullable() });
export const IdleDefault = z.object({ idleTimeoutMinutes: z.number().int().nullable() });

/** `POST /agent/v1/boxes/:slug/wake`: an allowed request reached a hibernated box on the calling host. */
export const WakeRequest = z.strictObject({});
export const WakeResponse = z.object({
  /** A start job is queued or already in flight for the box. */
  waking: z.boolean(),
  status: z.string(),
});

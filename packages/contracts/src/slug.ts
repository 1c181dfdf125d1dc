import { z } from "zod";

/**
 * Box slugs appear in DNS labels (`{port}-{slug}.code.{domain}` must stay within 63
 * characters), file names and log lines. Nothing on a host is named from the slug
 * directly when a kernel limit applies (TAP names derive from the box IP instead).
 */
export const SLUG_MIN = 3;
export const SLUG_MAX = 40;
const SLUG_RE = /^[a-z](?:[a-z0-9]|-(?!-))*[a-z0-9]$/;

export function slugProblem(slug: string): string | null {
  if (slug.length < SLUG_MIN || slug.length > SLUG_MAX) {
    return `must be ${SLUG_MIN} to ${SLUG_MAX} characters long`;
  }
  if (!SLUG_RE.test(slug)) {
    return "may contain only lowercase letters, digits and single hyphens, must start with a letter and end with a letter or digit";
  }
  return null;
}

export const Slug = z.string().superRefine((value, ctx) => {
  const problem = slugProblem(value);
  if (problem) ctx.addIssue({ code: "custom", message: `slug ${problem}` });
});

const ADJECTIVES = [
  "amber",
  "brisk",
  "calm",
  "deft",
  "eager",
  "fleet",
  "gentle",
  "hazel",
  "ivory",
  "jolly",
  "keen",
  "lucid",
  "mellow",
  "nimble",
  "olive",
  "plucky",
  "quiet",
  "rapid",
  "sunny",
  "tidy",
];
const NOUNS = [
  "badger",
  "comet",
  "delta",
  "ember",
  "falcon",
  "grove",
  "harbor",
  "island",
  "jasper",
  "kestrel",
  "lagoon",
  "meadow",
  "nebula",
  "orchid",
  "pepper",
  "quartz",
  "river",
  "summit",
  "tundra",
  "walnut",
];

/** A readable random slug, e.g. `brisk-falcon-3f9a`. `random` returns [0,1). */
export function generateSlug(random: () => number = Math.random): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const suffix = Math.floor(random() * 0x10000)
    .toString(16)
    .padStart(4, "0");
  return `${pick(ADJECTIVES)}-${pick(NOUNS)}-${suffix}`;
}

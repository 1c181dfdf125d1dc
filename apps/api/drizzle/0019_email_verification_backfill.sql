-- Accounts made before email verification existed got their trial at signup: they count as
-- verified from their creation, and their trial holds their address's one trial
-- (the key is billing/trial.ts's trialEmailKey: lower-cased, `+tag` dropped).
UPDATE "users" SET "email_verified_at" = "created_at" WHERE "email_verified_at" IS NULL;
--> statement-breakpoint
INSERT INTO "trial_grants" ("email_key", "user_id", "granted_at")
SELECT regexp_replace(lower(split_part(u."email", '@', 1)), '\+.*$', '') || '@' || lower(split_part(u."email", '@', 2)),
       u."id", l."at"
FROM "ledger_entries" l JOIN "users" u ON u."id" = l."user_id"
WHERE l."kind" = 'trial'
ORDER BY l."seq"
ON CONFLICT DO NOTHING;
--> statement-breakpoint
UPDATE "top_ups" SET "updated_at" = "created_at" WHERE "updated_at" IS NULL;

ALTER TABLE "github_accounts" ADD COLUMN "refresh_token_sealed" text;--> statement-breakpoint
ALTER TABLE "github_accounts" ADD COLUMN "refresh_token_expires_at" timestamp with time zone;
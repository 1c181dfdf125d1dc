ALTER TYPE "public"."box_status" ADD VALUE 'hibernating' BEFORE 'resetting';--> statement-breakpoint
ALTER TYPE "public"."box_status" ADD VALUE 'hibernated' BEFORE 'resetting';--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "memory_file_bytes" bigint;--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "idle_timeout_minutes" integer;--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "public_wake" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "last_active_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "idle_timeout_minutes" integer;
CREATE TYPE "public"."server_status" AS ENUM('pending', 'preparing', 'active', 'draining', 'disabled', 'error', 'archived');--> statement-breakpoint
ALTER TABLE "servers" ALTER COLUMN "status" SET DEFAULT 'pending'::"public"."server_status";--> statement-breakpoint
ALTER TABLE "servers" ALTER COLUMN "status" SET DATA TYPE "public"."server_status" USING "status"::"public"."server_status";
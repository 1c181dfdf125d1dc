CREATE TYPE "public"."box_status" AS ENUM('pending', 'creating', 'starting', 'running', 'stopping', 'stopped', 'resetting', 'deleting', 'deleted', 'error');--> statement-breakpoint
ALTER TABLE "boxes" ALTER COLUMN "status" SET DATA TYPE "public"."box_status" USING "status"::"public"."box_status";--> statement-breakpoint
ALTER TABLE "agent_jobs" ADD COLUMN "error_code" text;--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "error_code" text;
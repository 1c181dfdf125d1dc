ALTER TABLE "boxes" ALTER COLUMN "status" SET DATA TYPE text;--> statement-breakpoint
-- "pending" was never assigned; a box that somehow holds it was accepted and not yet created.
UPDATE "boxes" SET "status" = 'creating' WHERE "status" = 'pending';--> statement-breakpoint
DROP TYPE "public"."box_status";--> statement-breakpoint
CREATE TYPE "public"."box_status" AS ENUM('creating', 'starting', 'running', 'stopping', 'stopped', 'resetting', 'deleting', 'deleted', 'error');--> statement-breakpoint
ALTER TABLE "boxes" ALTER COLUMN "status" SET DATA TYPE "public"."box_status" USING "status"::"public"."box_status";
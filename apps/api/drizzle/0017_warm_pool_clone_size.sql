ALTER TABLE "server_warm_pools" ADD COLUMN "disk_gb" integer;--> statement-breakpoint
ALTER TABLE "server_warm_pools" ADD COLUMN "memory_mb" integer;
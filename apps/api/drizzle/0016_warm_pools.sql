CREATE TABLE "server_warm_pools" (
	"server_id" text NOT NULL,
	"template" text NOT NULL,
	"size" integer,
	"target" integer DEFAULT 0 NOT NULL,
	"ready" integer DEFAULT 0 NOT NULL,
	"filling" integer DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "server_warm_pools_server_id_template_pk" PRIMARY KEY("server_id","template")
);
--> statement-breakpoint
ALTER TABLE "server_warm_pools" ADD CONSTRAINT "server_warm_pools_server_id_servers_id_fk" FOREIGN KEY ("server_id") REFERENCES "public"."servers"("id") ON DELETE cascade ON UPDATE no action;
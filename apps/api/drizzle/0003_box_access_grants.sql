CREATE TABLE "box_access_grants" (
	"sid" text NOT NULL,
	"server_id" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	CONSTRAINT "box_access_grants_sid_server_id_pk" PRIMARY KEY("sid","server_id")
);
--> statement-breakpoint
ALTER TABLE "box_access_grants" ADD CONSTRAINT "box_access_grants_server_id_servers_id_fk" FOREIGN KEY ("server_id") REFERENCES "public"."servers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "box_access_grants_server_idx" ON "box_access_grants" USING btree ("server_id");
CREATE TABLE "ansible_plays" (
	"id" text PRIMARY KEY NOT NULL,
	"server_id" text NOT NULL,
	"playbook" text NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"created_by" text,
	"variables" jsonb NOT NULL,
	"counters" jsonb,
	"error" text,
	"pid" integer,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"ended_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "ansible_tasks" (
	"play_id" text NOT NULL,
	"task_id" text NOT NULL,
	"position" integer NOT NULL,
	"name" text NOT NULL,
	"role" text,
	"handler" boolean DEFAULT false NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"started_at" timestamp with time zone,
	"ended_at" timestamp with time zone,
	"output" text,
	"error" text,
	CONSTRAINT "ansible_tasks_play_id_task_id_pk" PRIMARY KEY("play_id","task_id")
);
--> statement-breakpoint
CREATE TABLE "server_ssh" (
	"server_id" text PRIMARY KEY NOT NULL,
	"host" text NOT NULL,
	"port" integer NOT NULL,
	"user" text NOT NULL,
	"control_plane_url" text,
	"host_keys" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "servers" ADD COLUMN "status_message" text;--> statement-breakpoint
ALTER TABLE "servers" ADD COLUMN "next_agent_token_hash" text;--> statement-breakpoint
ALTER TABLE "ansible_plays" ADD CONSTRAINT "ansible_plays_server_id_servers_id_fk" FOREIGN KEY ("server_id") REFERENCES "public"."servers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "ansible_plays" ADD CONSTRAINT "ansible_plays_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "ansible_tasks" ADD CONSTRAINT "ansible_tasks_play_id_ansible_plays_id_fk" FOREIGN KEY ("play_id") REFERENCES "public"."ansible_plays"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "server_ssh" ADD CONSTRAINT "server_ssh_server_id_servers_id_fk" FOREIGN KEY ("server_id") REFERENCES "public"."servers"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "ansible_plays_server_idx" ON "ansible_plays" USING btree ("server_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "ansible_plays_one_active_per_server_idx" ON "ansible_plays" USING btree ("server_id") WHERE status IN ('pending', 'running');--> statement-breakpoint
ALTER TABLE "servers" ADD CONSTRAINT "servers_next_agent_token_hash_unique" UNIQUE("next_agent_token_hash");
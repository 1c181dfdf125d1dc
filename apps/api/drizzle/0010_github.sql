CREATE TABLE "github_accounts" (
	"user_id" text PRIMARY KEY NOT NULL,
	"github_id" bigint NOT NULL,
	"login" text NOT NULL,
	"token_sealed" text NOT NULL,
	"token_expires_at" timestamp with time zone,
	"created_by_github" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "github_accounts_github_id_unique" UNIQUE("github_id")
);
--> statement-breakpoint
CREATE TABLE "github_app" (
	"id" text PRIMARY KEY NOT NULL,
	"app_id" bigint NOT NULL,
	"app_slug" text NOT NULL,
	"client_id" text NOT NULL,
	"web_url" text NOT NULL,
	"api_url" text NOT NULL,
	"private_key_sealed" text NOT NULL,
	"client_secret_sealed" text NOT NULL,
	"webhook_secret_sealed" text NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "github_deliveries" (
	"id" text PRIMARY KEY NOT NULL,
	"event" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "github_installation_users" (
	"installation_id" bigint NOT NULL,
	"user_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "github_installation_users_installation_id_user_id_pk" PRIMARY KEY("installation_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "github_installations" (
	"id" bigint PRIMARY KEY NOT NULL,
	"account_login" text NOT NULL,
	"account_id" bigint NOT NULL,
	"account_type" text NOT NULL,
	"repository_selection" text NOT NULL,
	"suspended_at" timestamp with time zone,
	"removed_at" timestamp with time zone,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "github_oauth_states" (
	"state_hash" text PRIMARY KEY NOT NULL,
	"browser_hash" text NOT NULL,
	"intent" text NOT NULL,
	"user_id" text,
	"verifier_sealed" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"used_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "github_repos" (
	"installation_id" bigint NOT NULL,
	"repo_id" bigint NOT NULL,
	"full_name_lower" text NOT NULL,
	"full_name" text NOT NULL,
	"private" boolean NOT NULL,
	CONSTRAINT "github_repos_installation_id_repo_id_pk" PRIMARY KEY("installation_id","repo_id")
);
--> statement-breakpoint
ALTER TABLE "boxes" ADD COLUMN "repo" text;--> statement-breakpoint
ALTER TABLE "github_accounts" ADD CONSTRAINT "github_accounts_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_installation_users" ADD CONSTRAINT "github_installation_users_installation_id_github_installations_id_fk" FOREIGN KEY ("installation_id") REFERENCES "public"."github_installations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_installation_users" ADD CONSTRAINT "github_installation_users_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_oauth_states" ADD CONSTRAINT "github_oauth_states_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_repos" ADD CONSTRAINT "github_repos_installation_id_github_installations_id_fk" FOREIGN KEY ("installation_id") REFERENCES "public"."github_installations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "github_inst_users_user_idx" ON "github_installation_users" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "github_repos_name_idx" ON "github_repos" USING btree ("full_name_lower");
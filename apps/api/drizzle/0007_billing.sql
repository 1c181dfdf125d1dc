CREATE TABLE "box_status_history" (
	"seq" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "box_status_history_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"box_id" text NOT NULL,
	"status" "box_status" NOT NULL,
	"size" text NOT NULL,
	"disk_gb" integer NOT NULL,
	"at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "invoices" (
	"id" text PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"month" text NOT NULL,
	"currency" text NOT NULL,
	"usage_total" bigint NOT NULL,
	"credits_total" bigint NOT NULL,
	"lines" jsonb NOT NULL,
	"issued_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "ledger_entries" (
	"seq" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "ledger_entries_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"user_id" text NOT NULL,
	"kind" text NOT NULL,
	"amount" bigint NOT NULL,
	"key" text NOT NULL,
	"box_id" text,
	"period_start" timestamp with time zone,
	"period_end" timestamp with time zone,
	"expires_at" timestamp with time zone,
	"memo" text,
	"at" timestamp with time zone NOT NULL,
	CONSTRAINT "ledger_entries_key_unique" UNIQUE("key")
);
--> statement-breakpoint
CREATE TABLE "prices" (
	"id" text PRIMARY KEY NOT NULL,
	"size" text NOT NULL,
	"compute_per_hour" bigint NOT NULL,
	"storage_per_gb_month" bigint NOT NULL,
	"effective_from" timestamp with time zone NOT NULL,
	"created_by" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "stripe_events" (
	"id" text PRIMARY KEY NOT NULL,
	"type" text NOT NULL,
	"received_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "top_ups" (
	"session_id" text PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"amount" bigint NOT NULL,
	"currency" text NOT NULL,
	"payment_intent" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage_settlements" (
	"box_id" text NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"period_end" timestamp with time zone NOT NULL,
	"user_id" text NOT NULL,
	"compute_ms" bigint NOT NULL,
	"storage_gb_ms" bigint NOT NULL,
	"compute_amount" bigint NOT NULL,
	"storage_amount" bigint NOT NULL,
	"compute_carry" bigint NOT NULL,
	"storage_carry" bigint NOT NULL,
	CONSTRAINT "usage_settlements_box_id_period_start_pk" PRIMARY KEY("box_id","period_start")
);
--> statement-breakpoint
CREATE TABLE "wallets" (
	"user_id" text PRIMARY KEY NOT NULL,
	"balance" bigint DEFAULT 0 NOT NULL,
	"warned_state" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "box_status_history" ADD CONSTRAINT "box_status_history_box_id_boxes_id_fk" FOREIGN KEY ("box_id") REFERENCES "public"."boxes"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "invoices" ADD CONSTRAINT "invoices_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_box_id_boxes_id_fk" FOREIGN KEY ("box_id") REFERENCES "public"."boxes"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "top_ups" ADD CONSTRAINT "top_ups_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "usage_settlements" ADD CONSTRAINT "usage_settlements_box_id_boxes_id_fk" FOREIGN KEY ("box_id") REFERENCES "public"."boxes"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "usage_settlements" ADD CONSTRAINT "usage_settlements_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "wallets" ADD CONSTRAINT "wallets_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "box_status_history_box_idx" ON "box_status_history" USING btree ("box_id","at");--> statement-breakpoint
CREATE UNIQUE INDEX "invoices_user_month_idx" ON "invoices" USING btree ("user_id","month");--> statement-breakpoint
CREATE INDEX "ledger_user_seq_idx" ON "ledger_entries" USING btree ("user_id","seq");--> statement-breakpoint
CREATE UNIQUE INDEX "prices_size_from_idx" ON "prices" USING btree ("size","effective_from");--> statement-breakpoint
CREATE INDEX "top_ups_payment_intent_idx" ON "top_ups" USING btree ("payment_intent");--> statement-breakpoint
CREATE INDEX "usage_user_idx" ON "usage_settlements" USING btree ("user_id","period_start");
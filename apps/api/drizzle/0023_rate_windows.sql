CREATE TABLE "rate_windows" (
	"key" text PRIMARY KEY NOT NULL,
	"hits" timestamp with time zone[] NOT NULL,
	"refused" boolean NOT NULL
);
--> statement-breakpoint
DROP TABLE "rate_hits" CASCADE;
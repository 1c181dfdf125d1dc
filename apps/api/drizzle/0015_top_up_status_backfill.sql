-- Top-ups credited before top_ups.status existed: their ledger entry (key topup:<session>) says they were paid.
UPDATE "top_ups" SET "status" = 'paid'
 WHERE "status" = 'open'
   AND EXISTS (SELECT 1 FROM "ledger_entries" l WHERE l."key" = 'topup:' || "top_ups"."session_id");

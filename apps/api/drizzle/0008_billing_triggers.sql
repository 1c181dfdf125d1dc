-- The ledger, settled usage and issued invoices are append-only: any UPDATE, DELETE or
-- TRUNCATE is refused by the database itself, whatever code (or person) tries it.
CREATE OR REPLACE FUNCTION doppio_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'table % is append-only: % refused', TG_TABLE_NAME, TG_OP
    USING ERRCODE = 'restrict_violation';
END
$$;
--> statement-breakpoint
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
  FOR EACH STATEMENT EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
CREATE TRIGGER usage_settlements_append_only BEFORE UPDATE OR DELETE ON usage_settlements
  FOR EACH ROW EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
CREATE TRIGGER usage_settlements_no_truncate BEFORE TRUNCATE ON usage_settlements
  FOR EACH STATEMENT EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
CREATE TRIGGER invoices_append_only BEFORE UPDATE OR DELETE ON invoices
  FOR EACH ROW EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
CREATE TRIGGER invoices_no_truncate BEFORE TRUNCATE ON invoices
  FOR EACH STATEMENT EXECUTE FUNCTION doppio_append_only();
--> statement-breakpoint
-- Every status a box enters is recorded with the box's updated_at (the control plane's clock
-- at that write), so metering sees every interval whichever code path changed the status.
CREATE OR REPLACE FUNCTION doppio_box_status_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
    INSERT INTO box_status_history (box_id, status, size, disk_gb, at)
    VALUES (NEW.id, NEW.status, NEW.size, NEW.disk_gb, NEW.updated_at);
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER boxes_status_history AFTER INSERT OR UPDATE OF status ON boxes
  FOR EACH ROW EXECUTE FUNCTION doppio_box_status_history();
--> statement-breakpoint
-- Boxes that exist before billing start metering now, at their current status.
INSERT INTO box_status_history (box_id, status, size, disk_gb, at)
  SELECT id, status, size, disk_gb, now() FROM boxes WHERE deleted_at IS NULL;

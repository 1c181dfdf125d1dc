-- Every committed change of a box or of a box's job is announced on the bus channel by the
-- database itself, in the transaction that makes it: the note is delivered if and only if
-- the change commits, whichever replica (or person) made it and whether or not that replica
-- lives long enough to say so (apps/api/src/realtime/pg-bus.ts). `r` is the writer's
-- application_name, which a replica sets to its bus name to skip its own notes. A box note
-- also carries the slug, which replicas of the version before this one require: during a
-- rolling upgrade they still read the notes of the upgraded ones.
-- Not announced: a box's activity time alone (services/idle.ts moves updated_at when the
-- stream should hear of it), a job's lease alone, and a job handed to its agent.
CREATE OR REPLACE FUNCTION doppio_bus_box() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  was boxes;
BEGIN
  IF TG_OP = 'UPDATE' THEN
    was := OLD;
    was.last_active_at := NEW.last_active_at;
    IF was IS NOT DISTINCT FROM NEW THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_notify('doppio_bus', json_build_object(
    'r', current_setting('application_name'), 'k', 'box',
    'team', NEW.team_id, 'id', NEW.id, 'slug', NEW.slug)::text);
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER boxes_bus AFTER INSERT OR UPDATE ON boxes
  FOR EACH ROW EXECUTE FUNCTION doppio_bus_box();
--> statement-breakpoint
CREATE OR REPLACE FUNCTION doppio_bus_job() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  was agent_jobs;
BEGIN
  IF NEW.box_id IS NULL OR NEW.status = 'delivered' THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    was := OLD;
    was.lease_expires_at := NEW.lease_expires_at;
    IF was IS NOT DISTINCT FROM NEW THEN
      RETURN NULL;
    END IF;
  END IF;
  PERFORM pg_notify('doppio_bus', json_build_object(
    'r', current_setting('application_name'), 'k', 'job',
    'team', (SELECT team_id FROM boxes WHERE id = NEW.box_id), 'id', NEW.id)::text);
  RETURN NULL;
END
$$;
--> statement-breakpoint
CREATE TRIGGER agent_jobs_bus AFTER INSERT OR UPDATE ON agent_jobs
  FOR EACH ROW EXECUTE FUNCTION doppio_bus_job();

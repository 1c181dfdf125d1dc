#!/usr/bin/env bash
# `postgres.sh start`: starts Debian's PostgreSQL cluster for the shared control-plane suite
# (idempotent) and prints the URL of a test role that may create databases.
# `postgres.sh stop`: stops the cluster again, but only if `start` was what started it.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
marker=.run/postgres-started-by-tests
if [ "${1:-start}" = stop ]; then
  if [ -f "$marker" ]; then pg_ctlcluster "$ver" main stop >&2 || true; rm -f "$marker"; fi
  exit 0
fi
mkdir -p .run
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$ver main"; then
  pg_createcluster "$ver" main >/dev/null
fi
port=$(pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" {print $3}')
if ! pg_lsclusters -h | awk -v v="$ver" '$1==v && $2=="main" {print $4}' | grep -q online; then
  pg_ctlcluster "$ver" main start >&2
  touch "$marker"
fi
for _ in $(seq 1 50); do
  pg_isready -q -h 127.0.0.1 -p "$port" && break
  sleep 0.2
done
runuser -u postgres -- psql -q -p "$port" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'doppio_test') THEN
    CREATE ROLE doppio_test LOGIN CREATEDB PASSWORD 'doppio_test';
  END IF;
  -- Tests drop their databases WITH (FORCE); an autovacuum worker on one has no role, and
  -- only pg_signal_backend lets a non-superuser end it ("must be a member of the role whose
  -- process is being terminated").
  IF NOT pg_has_role('doppio_test', 'pg_signal_backend', 'MEMBER') THEN
    GRANT pg_signal_backend TO doppio_test;
  END IF;
END $$;
SQL
echo "postgres://doppio_test:doppio_test@127.0.0.1:${port}/postgres"

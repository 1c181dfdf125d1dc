#!/usr/bin/env bash
# Runs every test: typecheck, lint, then the whole Vitest suite with real PostgreSQL
# (the control-plane suite runs on both PGlite and PostgreSQL).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== typecheck"
npx tsc -p tsconfig.json
npm run -s typecheck -w @doppio/dashboard
echo "== lint"
npx biome check .
echo "== unused code and dependencies (knip.jsonc)"
npx knip

TEST_DATABASE_URL=$(scripts/postgres.sh start)
export TEST_DATABASE_URL
trap 'scripts/postgres.sh stop' EXIT

echo "== tests"
npx vitest run "$@"

.PHONY: up down test bench lint typecheck bootstrap

bootstrap:
	@scripts/bootstrap.sh

up: bootstrap
	@npx tsx scripts/up.ts

down:
	@npx tsx scripts/down.ts

test: bootstrap
	@scripts/test.sh

bench: bootstrap
	npm run bench:dispatch
	npm run bench:edge
	npm run bench:create
	npm run bench:overhead
	npm run bench:outbox
	npm run bench:pool
	npm run bench:memory
	npm run bench:tcg
	npm run bench:logs
	npm run bench:isolation

lint:
	npx biome check .

typecheck:
	npx tsc -p tsconfig.json

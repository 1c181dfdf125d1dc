.PHONY: up down test bench lint typecheck bootstrap

bootstrap:
	@scripts/bootstrap.sh

up: bootstrap
	@scripts/up.sh

down:
	@scripts/down.sh

test: bootstrap
	@scripts/test.sh

bench: bootstrap
	npm run bench:dispatch

lint:
	npx biome check .

typecheck:
	npx tsc -p tsconfig.json

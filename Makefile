# nqd — the event backend for Nuxt Queue flows.
GO        ?= go
# Go packages of nqd: npm packages under sdk/typescript/node_modules may ship
# Go files of their own, which are not ours to build or test. The Go worker
# SDK (sdk/go) is a module of its own, which this one uses through a replace
# directive: its tests are in workertest/, and lint and tidy-check look at it
# apart.
PKGS       = $(shell $(GO) list ./... | grep -v /node_modules/)
# E2E_ROUNDS: how many times the bench targets measure each e2e row, alternating with the Node original's
E2E_ROUNDS ?= 2
# The server's release tags are v1.2.3; the Go worker SDK's, sdk/go/v1.2.3, may
# name the same commit and are not nqd's version.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
# Every binary is built with the same flags, so that make run, make build and
# make demo share one build cache: a flag that differs (-trimpath, CGO_ENABLED)
# changes the cache key of every package and compiles them all again.
GOBUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)"
# The demo's listen address; NQ_ADDR in the environment overrides it.
NQ_ADDR   ?= 127.0.0.1:8080
BENCHTIME ?= 2s

.PHONY: run build release release-check test test-tools test-py test-ts test-nuxt test-short lint fuzz bench bench-e2e noop-worker bench-pg bench-go bench-appends bench-sdks screenshots golden tidy-check vuln clean

## run: build bin/nqd, then start it on the embedded store in ./data (set NQ_REDIS_URL to use Redis)
run: build
	exec bin/nqd

## build: a static binary in bin/nqd
build:
	@echo "building bin/nqd $(VERSION) (the first build compiles every dependency and takes a few minutes)"
	$(GOBUILD) -o bin/nqd ./cmd/server

## release: the release artifacts in dist/: static nqd binaries for linux and darwin on amd64 and arm64,
## the npm and Python packages, the container image when Docker answers, and SHA256SUMS (scripts/release.sh)
release:
	VERSION=$(VERSION) GO=$(GO) PYTHON=$(PYTHON) scripts/release.sh

## release-check: the release build of this machine's platform alone, and its -version
release-check:
	VERSION=$(VERSION) GO=$(GO) scripts/release.sh --check

## test: every test with the race detector; Redis and PostgreSQL tests start their own servers.
## One package at a time: several packages start servers, browsers and load of
## their own, and on a small machine running them side by side only slows each.
## With Go alone it passes: a suite whose tool is missing is skipped, with one
## line saying what to install, unless its NQD_REQUIRE_* is 1 (CI sets them all).
test: test-tools
	$(GO) test -race -count=1 -cover -p 1 -timeout 20m $(PKGS)
	NQD_TEST_TRANSPORT=http $(GO) test -race -count=1 -timeout 10m ./workertest/
	$(MAKE) test-py
	$(MAKE) test-ts

# test-tools says which of the Go suites' servers and browser are missing:
# go test shows the skips only with -v. The tests themselves skip or, under
# NQD_REQUIRE_*, fail.
test-tools:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 || echo "test: redis-server or redis-cli not found: the Redis tests are skipped (install redis-server)"
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		echo "test: PostgreSQL's initdb not found: the PostgreSQL tests are skipped (install postgresql)"
	@command -v chromium >/dev/null 2>&1 || echo "test: chromium not found: the browser tests are skipped (install chromium)"

## test-py: the Python SDK (sdk/python): type check, lint, and its tests against an nqd built from this tree.
## Skipped without Debian's python3 with pytest, mypy, pyflakes and websockets (the SDK's one dependency), unless
## NQD_REQUIRE_PYTHON=1 (CI) makes a missing one a failure.
PYTHON ?= /usr/bin/python3
test-py:
	@missing=""; \
	for m in pytest mypy pyflakes websockets; do $(PYTHON) -c "import $$m" >/dev/null 2>&1 || missing="$$missing python3-$$m"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$NQD_REQUIRE_PYTHON" = 1 ]; then echo "test-py: $(PYTHON) lacks$$missing and NQD_REQUIRE_PYTHON=1"; exit 1; fi; \
		echo "test-py: the Python SDK tests are skipped (install$$missing)"; exit 0; \
	fi; \
	set -ex; \
	(cd sdk/python && $(PYTHON) -m mypy); \
	$(PYTHON) -m pyflakes sdk/python; \
	$(PYTHON) -m pytest -q sdk/python

## test-ts: the TypeScript SDK (sdk/typescript): npm ci, lint, typecheck, build, and
## its tests against an nqd built from this checkout. Skipped without npm, unless
## NQD_REQUIRE_NODE=1 (CI) makes a missing npm a failure.
test-ts:
	@if ! command -v npm >/dev/null 2>&1; then \
		if [ "$$NQD_REQUIRE_NODE" = 1 ]; then echo "test-ts: npm not found and NQD_REQUIRE_NODE=1"; exit 1; fi; \
		echo "test-ts: npm not found: the TypeScript SDK tests are skipped (install Node.js 20 or newer with npm)"; exit 0; \
	fi; \
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run lint && npm run typecheck && GO=$(GO) npm test
	$(MAKE) test-nuxt

## test-nuxt: the Nuxt module (sdk/nuxt): npm ci, lint, typecheck, build, and its tests: a
## fresh Nuxt 4 app with the module and the SDK as npm packs them, against an nqd built
## from this checkout. nuxt comes from the npm registry into NQD_NUXT_CACHE (default
## nqd-nuxt-cache in the temporary folder), installed once and reused. Skipped without
## npm, unless NQD_REQUIRE_NODE=1 (CI) makes a missing npm a failure.
test-nuxt:
	@if ! command -v npm >/dev/null 2>&1; then \
		if [ "$$NQD_REQUIRE_NODE" = 1 ]; then echo "test-nuxt: npm not found and NQD_REQUIRE_NODE=1"; exit 1; fi; \
		echo "test-nuxt: npm not found: the Nuxt module tests are skipped (install Node.js 20 or newer with npm)"; exit 0; \
	fi; \
	set -e; \
	(cd sdk/typescript && npm ci --no-audit --no-fund && npm run build && GO=$(GO) node scripts/build-nqd.mjs); \
	cd sdk/nuxt && npm ci --no-audit --no-fund && npm run lint && npm run typecheck && npm run build && \
		NQD_BIN=../typescript/.test-bin/nqd npm test

## test-short: the tests without the race detector, for a quick loop
test-short:
	$(GO) test -count=1 $(PKGS)

## lint: vet, formatting and staticcheck, of nqd and of the Go worker SDK's module
lint:
	$(GO) vet $(PKGS)
	cd sdk/go && $(GO) vet ./...
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest $(PKGS)
	cd sdk/go && $(GO) run honnef.co/go/tools/cmd/staticcheck@latest ./...

## fuzz: longer runs of the fuzz targets
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzApply -fuzztime=30s ./reducers
	$(GO) test -run='^$$' -fuzz=FuzzCheckpoint -fuzztime=30s ./reducers
	$(GO) test -run='^$$' -fuzz=FuzzPayloads -fuzztime=30s ./reducers
	$(GO) test -run='^$$' -fuzz=FuzzObject -fuzztime=30s ./internal/jsonscan
	$(GO) test -run='^$$' -fuzz=FuzzParseID -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzUnmarshal -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzDecodeStored -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzDecoder -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzDecodeNodeFields -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzMarshal -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzDecodeAppend -fuzztime=30s ./handlers
	$(GO) test -run='^$$' -fuzz=FuzzStrictJSON -fuzztime=30s ./handlers
	$(GO) test -run='^$$' -fuzz=FuzzCompile -fuzztime=30s ./schedule
	$(GO) test -run='^$$' -fuzz=FuzzResumePlan -fuzztime=30s ./stream
	$(GO) test -run='^$$' -fuzz=FuzzTriggerID -fuzztime=30s ./auth
	$(GO) test -run='^$$' -fuzz=FuzzParseTokens -fuzztime=30s ./auth
	$(GO) test -run='^$$' -fuzz=FuzzFilterOrder -fuzztime=30s ./store
	$(GO) test -run='^$$' -fuzz=FuzzCondition -fuzztime=30s ./cond
	$(GO) test -run='^$$' -fuzz=FuzzNameRules -fuzztime=30s ./event
	$(GO) test -run='^$$' -fuzz=FuzzResolveMeta -fuzztime=30s ./handlers
	$(GO) test -run='^$$' -fuzz=FuzzResumePosition -fuzztime=30s ./stream

## bench: load profiles on Redis against a plain-Redis baseline, and flow runs end to end raced in the
## same run against a running Node original named by NODE_ORIGINAL (a KEY=value file with NODE_URL,
## SERVER_PID, REDIS_PID; without it nqd alone) (about 4 minutes); rewrites BENCHMARKS.md
bench: build noop-worker
	$(GO) run ./cmd/nqbench -nqd bin/nqd -duration 20s -json bin/bench.json -markdown BENCHMARKS.md \
		-e2e-rounds $(E2E_ROUNDS) $(if $(NODE_ORIGINAL),-node-env $(NODE_ORIGINAL)) -version $(VERSION) \
		-command "make bench$(if $(NODE_ORIGINAL), NODE_ORIGINAL=<its env file>)"

## bench-e2e: the e2e profile alone (closed-loop flow runs with the noop worker in its own process, on the
## embedded store and Redis, C = 8 and 32, raced against the Node original NODE_ORIGINAL names as for bench),
## with nqd's CPU and allocation profiles in bin/pprof; prints its table
bench-e2e: build noop-worker
	$(GO) run ./cmd/nqbench -nqd bin/nqd -profiles e2e -pprof-dir bin/pprof -json bin/e2e.json \
		-e2e-rounds $(E2E_ROUNDS) $(if $(NODE_ORIGINAL),-node-env $(NODE_ORIGINAL))

noop-worker:
	$(GOBUILD) -o bin/noop-worker ./cmd/noop-worker

## bench-pg: nqd on a throwaway PostgreSQL (about 1 minute): appends against INSERT + pg_notify, and flow runs
## end to end; prints the tables and writes them to bin/bench-pg.md
bench-pg: build
	$(GO) run ./cmd/nqbench -nqd bin/nqd -duration 10s -profiles pg-appends,pg-flows -markdown bin/bench-pg.md

## bench-cluster: HTTP appends with nqd on one Redis and on a Redis Cluster of three primaries with a
## replica each, its keys in one shard and in nine (about 1.5 minutes), with each node's keys and
## commands; prints them
bench-cluster: build
	$(GO) run ./cmd/nqbench -nqd bin/nqd -duration 10s -append-rate 1000 -profiles cluster

## bench-appends: go-test HTTP append benchmark on Redis against redis-benchmark XADD at the same concurrency
bench-appends:
	./scripts/bench-appends.sh

## bench-sdks: no-op steps per second through each SDK's worker (Go, TypeScript, Python), side by side
bench-sdks:
	./scripts/bench-sdks.sh

## bench-go: store, handler and reducer go-test benchmarks
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./store/... ./handlers/... ./reducers/...

## screenshots: rewrite docs/screenshots from the dashboard's browser tests
screenshots:
	NQD_SCREENSHOTS=1 NQD_REQUIRE_BROWSER=1 $(GO) test -count=1 -run Dashboard ./web/webtest

## golden: rewrite golden files (review the diff before committing)
golden:
	$(GO) test ./reducers/... ./handlers/... -update

## tidy-check: fail if go mod tidy would change go.mod or go.sum (nqd's or the Go worker SDK's)
tidy-check:
	$(GO) mod tidy -diff
	cd sdk/go && $(GO) mod tidy -diff

## vuln: known vulnerabilities in dependencies
vuln:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@latest $(PKGS)

clean:
	rm -rf bin dist

.PHONY: demo
## demo: nqd with the example flows (examples/flows), the demo worker, and a run of each flow; Ctrl-C stops both.
## It listens on NQ_ADDR (default 127.0.0.1:8080) and keeps its data in NQ_DATA_DIR like nqd.
demo: build
	@echo "building bin/demo-worker"
	$(GOBUILD) -o bin/demo-worker ./cmd/demo-worker
	@set -e; \
	addr='$(NQ_ADDR)'; host=$${addr%:*}; port=$${addr##*:}; \
	case "$$host" in ""|0.0.0.0|"[::]") host=127.0.0.1;; esac; \
	url="http://$$host:$$port"; \
	NQ_FLOWS_DIR=examples/flows NQ_ADDR="$$addr" bin/nqd & nqd=$$!; \
	trap 'kill $$nqd $$worker 2>/dev/null || true; wait' INT TERM EXIT; \
	until curl -sf "$$url/healthz" >/dev/null; do \
		kill -0 $$nqd 2>/dev/null || { echo "nqd did not start"; exit 1; }; sleep 0.2; \
	done; \
	bin/demo-worker --url "$$url" & worker=$$!; \
	for flow in example-flow diamond ml-training pipeline; do \
		curl -sf -X POST -H 'Content-Type: application/json' -d '{}' "$$url/api/_flows/$$flow/start"; echo; \
	done; \
	echo "dashboard: $$url$${NQ_WEB_BASE}/"; \
	echo "runs: curl '$$url/api/_flows/diamond/runs'  events: curl $$url/api/_events/flow/<runId>"; \
	echo "Ctrl-C stops nqd and the worker"; \
	wait

# Every target installs what it needs into the project (.tools/, ignored by
# git), starts its servers on 127.0.0.1 with free ports, and stops them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
PYTHON ?= python3

TOOLS       := $(CURDIR)/.tools
export TOOLS PYTHON
# Each Python venv's path is keyed by its requirements file, the Python and
# the installer (tools/venv.sh), so a changed file gets a new venv and work
# trees that share .tools never remove each other's.
VENV_MOTO   := $(shell TOOLS=$(TOOLS) PYTHON=$(PYTHON) tools/venv.sh path moto)
VENV_SAM    := $(shell TOOLS=$(TOOLS) PYTHON=$(PYTHON) tools/venv.sh path sam)
VENV_VERIFY := $(shell TOOLS=$(TOOLS) PYTHON=$(PYTHON) tools/venv.sh path verify)
ifeq ($(VENV_MOTO),)
$(error tools/venv.sh could not name the venvs: is $(PYTHON) installed?)
endif
export MOTO_VENV := $(VENV_MOTO)
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
RIE         := $(TOOLS)/rie-$(RIE_VERSION)/aws-lambda-rie
HOST_BOOTSTRAP := $(TOOLS)/host/bootstrap

# What the Go tests need from outside: moto (started by tools/with-moto.sh)
# and the emulator. The REQUIRE variables turn a missing one into a failure.
# The managed-instances test needs root (the emulator starts the runtime as
# Lambda's sandbox user): required as root, as CI runs it; skipped otherwise.
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo 1)
TEST_ENV := IDEM_REQUIRE_MOTO=1 IDEM_REQUIRE_E2E=1 IDEM_REQUIRE_MANAGED=$(IS_ROOT) IDEM_TEST_RIE=$(RIE) IDEM_TEST_WEBHOOK_VERIFIER=$(VENV_VERIFY)/bin/python

.PHONY: help test unit examples examples-lint demo soak walkthrough bench bench-ab bench-peer vet fmt-check tools clean host-bootstrap

## help: list the targets
help:
	@grep -hE '^## ' $(MAKEFILE_LIST) | sed -e 's/^## //' | awk '{i = index($$0, ": "); printf "  %-22s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2)}'

## test: every check and every test (what .ci/run calls)
test: fmt-check vet tools
	$(MAKE) --no-print-directory sam-check
	# the examples module's templates (its functions' tests run in ./... below, under the emulator)
	$(MAKE) --no-print-directory examples-lint
	# what waitress does at its connection limit, and that moto_server.py lifts it
	$(VENV_MOTO)/bin/python -m unittest tools/moto_server_test.py
	$(TEST_ENV) MOTO_SOAK=1 tools/with-moto.sh $(GO) test -race -count=1 -timeout 15m ./...
	# canonjson against the standard library's RFC 8785 canonicalizer (experimental in Go 1.26), and its
	# allocations on worst-case bodies (measured without -race, which changes what escapes)
	GOEXPERIMENT=jsonv2 $(GO) test -count=1 -run 'TestAgainstJSONText|TestWorstCaseBodiesAllocateLittle' ./internal/canonjson/
	# the same bodies' allocations through the SQS adapter (fingerprint and key decode), also without -race; built
	# as the e2e tests build the bootstrap (CGO_ENABLED=0, lambda.norpc) so that it reuses their compiled packages
	# (6 s instead of 32 s after a cold make test here)
	CGO_ENABLED=0 $(GO) test -tags lambda.norpc -count=1 -run 'TestWorstCaseBodiesAllocateLittleThroughTheAdapter' ./sqsbatch/
	@[ -n "$(IS_ROOT)" ] || echo "note: TestE2EManagedInstances was skipped: the emulator's managed-instances mode needs root (docs/local.md)"

## examples: the examples module (examples/, a module of its own): templates linted, functions driven under the emulator (queue consumers through moto's SQS)
examples: tools
	$(MAKE) --no-print-directory examples-lint
	$(TEST_ENV) tools/with-moto.sh $(GO) test -count=1 ./internal/examples/

# sam validate --lint on each example's template (sam build is not run: it
# costs seconds of CPU per template).
examples-lint: $(VENV_SAM)/.installed
	cd examples && $(GO) vet ./...
	for t in examples/*/template.yaml; do (cd "$$(dirname "$$t")" && $(SAM_ENV) $(SAM) validate --lint) || exit 1; done

## unit: the hermetic tests only (minidyn in-process; moto and e2e tests skip)
unit:
	$(GO) test -race -count=1 ./...

## vet: go vet, and the canonjson differential test's build under GOEXPERIMENT=jsonv2
vet:
	# -race: vet then compiles the dependencies as go test -race does, and
	# the test build reuses them (127 compiles became 52 for canonjson's
	# test with an empty build cache)
	$(GO) vet -race ./...
	GOEXPERIMENT=jsonv2 $(GO) vet ./internal/canonjson/

## fmt-check: gofmt has nothing to change
fmt-check:
	@out=$$(gofmt -l $$(find . -path ./.tools -prune -o -name '*.go' -print)); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

## tools: the pinned tools, installed in parallel
tools:
	$(MAKE) --no-print-directory -j3 $(VENV_MOTO)/.installed $(VENV_SAM)/.installed $(VENV_VERIFY)/.installed $(RIE)

$(TOOLS)/venv-%/.installed:
	tools/venv.sh install $(firstword $(subst -, ,$*)) >/dev/null

# The emulator, one directory per version; .tools/bin/aws-lambda-rie (the
# commands' default -rie) points at the newest.
$(RIE):
	mkdir -p $(dir $@) $(TOOLS)/bin
	CGO_ENABLED=0 GOBIN=$(dir $@) $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)
	ln -sfn $@ $(TOOLS)/bin/aws-lambda-rie

## host-bootstrap: the function built for this machine, to run under the emulator
host-bootstrap:
	CGO_ENABLED=0 $(GO) build -tags lambda.norpc -o $(HOST_BOOTSTRAP) ./cmd/handler

## demo: the main job, locally: the bootstrap under the emulator, moto, a webhook receiver
demo:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap
	tools/with-moto.sh $(GO) run ./cmd/demo -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -events events

SOAK_EVENTS ?= 5000

## soak: the chaos soak, 5,000 events (SOAK_EVENTS) through the queues with faults, an outage and kills; writes RELIABILITY.md (not in CI; make test runs 300)
soak:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap
	tools/with-moto.sh $(GO) run ./cmd/soak -events $(SOAK_EVENTS) -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -out RELIABILITY.md

BENCH_DIR := $(TOOLS)/bench
# Events per end-to-end run of make bench, bench-ab and bench-peer.
BENCH_EVENTS ?= 2000

# The commit whose SQS adapter section 7's "before" column measures: the
# last one that decoded the whole body for the key expression (issue 29).
WORSTCASE_BASE ?= deb1682
# The last commit whose adapter benchmark compiles against WORSTCASE_BASE's packages (internal/sqsbatch and
# internal/eventkey; the queue path has been the public sqsbatch and keyexpr since): the base runs its files.
WORSTCASE_BENCH_FILES ?= 465f817

## bench: measure what an event costs; prints a table and writes BENCHMARKS.md
bench:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap
	mkdir -p $(BENCH_DIR)
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./internal/idem/ | tee $(BENCH_DIR)/engine.txt
	$(GO) test -run '^$$' -bench BenchmarkEngineFresh -benchtime 2s -cpuprofile $(BENCH_DIR)/cpu.prof -o $(BENCH_DIR)/idem.test ./internal/idem/ > /dev/null
	$(GO) tool pprof -top -nodecount 25 $(BENCH_DIR)/idem.test $(BENCH_DIR)/cpu.prof > $(BENCH_DIR)/profile.txt 2>/dev/null
	# section 7: the fingerprint alone and through the SQS adapter, one run of each in turn, so that both see the
	# same load (the report divides one by the other)
	$(GO) test -c -o $(BENCH_DIR)/canonjson.test ./internal/canonjson/
	$(GO) test -c -o $(BENCH_DIR)/sqsbatch.test ./sqsbatch/
	rm -f $(BENCH_DIR)/worstcase-after.txt $(BENCH_DIR)/worstcase-adapter-after.txt
	for run in 1 2 3 4 5; do \
		$(BENCH_DIR)/canonjson.test -test.run '^$$' -test.bench 'WorstCase/after' -test.benchmem -test.benchtime 20x | tee -a $(BENCH_DIR)/worstcase-after.txt; \
		$(BENCH_DIR)/sqsbatch.test -test.run '^$$' -test.bench 'WorstCaseAdapter' -test.benchmem -test.benchtime 20x | tee -a $(BENCH_DIR)/worstcase-adapter-after.txt; \
	done
	$(GO) test -run '^$$' -bench 'WorstCase/before' -benchmem -benchtime 1x -count 3 ./internal/canonjson/ | tee $(BENCH_DIR)/worstcase-before.txt
	# the same bodies through the adapter at WORSTCASE_BASE, with this tree's shapes and the benchmark as it was at
	# WORSTCASE_BENCH_FILES (self-contained for that)
	rm -rf $(BENCH_DIR)/worstcase-base && mkdir -p $(BENCH_DIR)/worstcase-base
	git archive $(WORSTCASE_BASE) | tar -x -C $(BENCH_DIR)/worstcase-base
	mkdir -p $(BENCH_DIR)/worstcase-base/internal/testing/worstcase
	cp internal/testing/worstcase/*.go $(BENCH_DIR)/worstcase-base/internal/testing/worstcase/
	for f in worstcase_test.go cputime_test.go cputime_other_test.go race_test.go norace_test.go; do \
		git show $(WORSTCASE_BENCH_FILES):internal/sqsbatch/$$f > $(BENCH_DIR)/worstcase-base/internal/sqsbatch/$$f || exit 1; \
	done
	cd $(BENCH_DIR)/worstcase-base && $(GO) test -run '^$$' -bench 'WorstCaseAdapter' -benchmem -benchtime 1x -count 3 ./internal/sqsbatch/ | tee $(BENCH_DIR)/worstcase-adapter-before.txt
	CGO_ENABLED=0 $(GO) build -tags lambda.norpc,benchprofile -o $(BENCH_DIR)/bootstrap-profile ./cmd/handler
	tools/with-moto.sh $(GO) run ./cmd/bench -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) \
		-profile-bootstrap $(BENCH_DIR)/bootstrap-profile \
		-gobench $(BENCH_DIR)/engine.txt -profile $(BENCH_DIR)/profile.txt -events $(BENCH_EVENTS) \
		-worstcase-after $(BENCH_DIR)/worstcase-after.txt -worstcase-before $(BENCH_DIR)/worstcase-before.txt \
		-worstcase-adapter-after $(BENCH_DIR)/worstcase-adapter-after.txt -worstcase-adapter-before $(BENCH_DIR)/worstcase-adapter-before.txt -out BENCHMARKS.md

# The commit whose bootstrap bench-ab compares against: by default where
# this branch left main.
BENCH_BASE ?= $(shell git merge-base HEAD main 2>/dev/null || git rev-parse HEAD~1)
BENCH_RUNS ?= 3

## bench-ab: interleaved A/B of the end-to-end CPU and cold start, this bootstrap against BENCH_BASE's (default: the merge base with main); writes its section of BENCHMARKS.md
bench-ab:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap
	rm -rf $(BENCH_DIR)/base && mkdir -p $(BENCH_DIR)/base
	git archive $(BENCH_BASE) | tar -x -C $(BENCH_DIR)/base
	cd $(BENCH_DIR)/base && CGO_ENABLED=0 $(GO) build -tags lambda.norpc -o $(BENCH_DIR)/base-bootstrap ./cmd/handler
	tools/with-moto.sh $(GO) run ./cmd/bench -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -baseline $(BENCH_DIR)/base-bootstrap -baseline-name $(BENCH_BASE) -runs $(BENCH_RUNS) -events $(BENCH_EVENTS) -out BENCHMARKS.md

PEER_DIR := tools/peer

$(PEER_DIR)/node_modules/.installed: $(PEER_DIR)/package.json $(PEER_DIR)/package-lock.json
	cd $(PEER_DIR) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

## bench-peer: Powertools for AWS Lambda (TypeScript), pinned in tools/peer, next to oncely on the same events, moto and webhook, alternating (needs Node and npm; not in make test); writes its section of BENCHMARKS.md
bench-peer:
	$(MAKE) --no-print-directory -j3 $(VENV_MOTO)/.installed $(RIE) $(PEER_DIR)/node_modules/.installed
	$(MAKE) --no-print-directory host-bootstrap
	tools/with-moto.sh $(GO) run ./cmd/bench -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -peer $(PEER_DIR) -runs $(BENCH_RUNS) -events $(BENCH_EVENTS) -out BENCHMARKS.md

## walkthrough: the engine's seed scenarios over the in-memory store (no AWS, no tools)
walkthrough:
	$(GO) run ./cmd/walkthrough

## clean: remove the installed tools and build outputs
clean:
	rm -rf $(TOOLS) .aws-sam bin $(PEER_DIR)/node_modules

include mk/sam.mk
include mk/stack.mk
include mk/crash.mk
include mk/flake.mk

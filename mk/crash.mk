# The crash matrix in full: SIGKILL of the runtime before, during and after
# the commit, for the ledger action and for notify (internal/e2e/crash_test.go).
# `make test` runs each cell twice; this runs CRASH_RUNS times and prints the
# matrix. Included by the Makefile.

CRASH_RUNS ?= 20

.PHONY: crash

## crash: the crash matrix, CRASH_RUNS (20) runs per cell; prints side effects per event
crash: tools
	$(TEST_ENV) CRASH_RUNS=$(CRASH_RUNS) CRASH_REPORT=$(TOOLS)/crash-report.txt tools/with-moto.sh \
		$(GO) test -count=1 -timeout 30m -run '^TestE2ECrashMatrix$$' ./internal/e2e/
	@cat $(TOOLS)/crash-report.txt

# The flake hunt: every test that starts a server or an emulator, or waits
# on time, run FLAKE_COUNT times while FLAKE_BUSY CPU hogs keep the cores
# busy, packages FLAKE_P at a time (tools/flakehunt). Not part of make test:
# at 20 runs it takes about an hour. Prints test, runs, failures; keeps
# each failed run's output, and moto's SQS trace, under .tools/flakehunt
# (the hunt before moves to .tools/flakehunt.previous; compare with
# FLAKE_ARGS='-before .tools/flakehunt.previous/results.json').
# Included by the Makefile, which defines GO, TOOLS and TEST_ENV.

FLAKE_COUNT ?= 20
FLAKE_BUSY  ?= 2
FLAKE_P     ?= 2
FLAKE_RUN   ?=
FLAKE_ARGS  ?=
FLAKE_DIR   := $(TOOLS)/flakehunt

.PHONY: flake-hunt

## flake-hunt: run each test that starts a server or waits on time FLAKE_COUNT (20) times with the cores kept busy; a table of failures per test (not in make test)
flake-hunt: tools
	rm -rf $(FLAKE_DIR).previous && if [ -d $(FLAKE_DIR) ]; then mv $(FLAKE_DIR) $(FLAKE_DIR).previous; fi
	$(TEST_ENV) MOTO_SOAK=1 MOTO_TRACE_DIR=$(FLAKE_DIR)/moto tools/with-moto.sh \
		$(GO) run ./tools/flakehunt -count $(FLAKE_COUNT) -busy $(FLAKE_BUSY) -p $(FLAKE_P) \
		-out $(FLAKE_DIR) $(if $(FLAKE_RUN),-run '$(FLAKE_RUN)') $(FLAKE_ARGS)

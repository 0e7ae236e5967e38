# The operator's tool, and a local stack to try it on. Included by the
# Makefile, which defines GO, TOOLS, RIE, VENV_MOTO and HOST_BOOTSTRAP.

STACK_DIR := $(TOOLS)/stack

.PHONY: oncelyctl stack

## oncelyctl: the operator's tool, built into bin/oncelyctl
oncelyctl:
	$(GO) build -o bin/oncelyctl ./cmd/oncelyctl

## stack: moto, the function under the emulator and a fake downstream, up until Ctrl-C (docs/operating.md)
stack:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap oncelyctl
	mkdir -p $(STACK_DIR)
	$(GO) build -o $(STACK_DIR)/devstack ./cmd/devstack
	tools/with-moto.sh $(STACK_DIR)/devstack -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -dir $(STACK_DIR) -bin bin

# The operator's tool, and a local stack to try it on. Included by the
# Makefile, which defines GO, TOOLS, RIE, VENV_MOTO and HOST_BOOTSTRAP.

STACK_DIR := $(TOOLS)/stack
# STACK_ENV: a file of the function's variables (NAME=value lines, or SAM's
# env.json) for the stack's function; they win over the same variables set
# in the environment (IDEMPOTENCY_TTL=48h make stack).
STACK_ENV ?=

.PHONY: oncelyctl stack

## oncelyctl: the operator's tool, built into bin/oncelyctl
oncelyctl:
	$(GO) build -o bin/oncelyctl ./cmd/oncelyctl

## stack: moto, the function under the emulator and a fake downstream, up until Ctrl-C; the function's variables from the environment or STACK_ENV=FILE (docs/operating.md)
stack:
	$(MAKE) --no-print-directory -j2 $(VENV_MOTO)/.installed $(RIE)
	$(MAKE) --no-print-directory host-bootstrap oncelyctl
	mkdir -p $(STACK_DIR)
	$(GO) build -o bin/devstack ./cmd/devstack
	tools/with-moto.sh bin/devstack -rie $(RIE) -bootstrap $(HOST_BOOTSTRAP) -dir $(STACK_DIR) -bin bin $(if $(STACK_ENV),-env-file $(STACK_ENV))

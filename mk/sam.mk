# SAM: build the Lambda the way `sam build` does, and check the template.
# Included by the Makefile, which defines GO, VENV_SAM and its install rule.

SAM     := $(VENV_SAM)/bin/sam
# PYTHONDONTWRITEBYTECODE= : the first run writes the venv's byte-code
# (tools/venv.sh compiles none); without it each sam command took 16 s of
# CPU instead of 7.
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 PYTHONDONTWRITEBYTECODE=
# Two functions from the same bootstrap: sam build runs each one's target
# (one recipe), and sam-check checks both artifacts.
SAM_FUNCTIONS := ApiFunction QueueFunction

# sam build (BuildMethod: makefile) sets ARTIFACTS_DIR; run by hand, the
# binary lands in bin/ (git-ignored) instead of /bootstrap.
ARTIFACTS_DIR ?= $(CURDIR)/bin

.PHONY: build-ApiFunction build-QueueFunction sam-check template-managed-instances

## build-ApiFunction, build-QueueFunction: the Lambda binary (linux/arm64, provided.al2023), as sam build calls it
build-ApiFunction build-QueueFunction:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap ./cmd/handler

## sam-check: sam validate --lint, sam build (no Docker), and an arm64 ELF bootstrap; the managed-instances variant validated too
sam-check: $(VENV_SAM)/.installed template-managed-instances
	$(SAM_ENV) $(SAM) validate --lint
	$(SAM_ENV) $(SAM) validate --lint --template-file $(MI_TEMPLATE)
	$(SAM_ENV) $(SAM) validate --template-file $(MI_TEMPLATE)
	$(SAM_ENV) $(SAM) build --build-in-source
	@for fn in $(SAM_FUNCTIONS); do \
	bin=.aws-sam/build/$$fn/bootstrap; \
	if [ ! -f "$$bin" ]; then echo "sam-check: $$bin was not built" >&2; exit 1; fi; \
	magic=$$(od -An -tx1 -N4 "$$bin" | tr -d ' \n'); \
	class=$$(od -An -tx1 -j4 -N1 "$$bin" | tr -d ' \n'); \
	machine=$$(od -An -tx1 -j18 -N2 "$$bin" | tr -d ' \n'); \
	if [ "$$magic" != 7f454c46 ]; then echo "sam-check: $$bin is not an ELF file (magic $$magic)" >&2; exit 1; fi; \
	if [ "$$class" != 02 ] || [ "$$machine" != b700 ]; then \
		echo "sam-check: $$bin is not 64-bit aarch64 (EI_CLASS $$class, e_machine $$machine; want 02, b700)" >&2; exit 1; \
	fi; \
	if command -v file >/dev/null; then file -b "$$bin"; fi; \
	echo "sam-check: OK: $$bin is a linux/arm64 ELF ($$(wc -c <"$$bin") bytes)"; \
	done; \
	echo "sam-check: OK: template valid and linted"

# The Lambda Managed Instances variant of template.yaml (optional; the
# default deploy stays on Lambda's own fleet). tools/managed_instances.py
# says what it changes; docs/deploy.md how to use it.
MI_TEMPLATE := .aws-sam/managed-instances/template.yaml

## template-managed-instances: write the Lambda Managed Instances variant of template.yaml to .aws-sam/managed-instances/
template-managed-instances: $(VENV_SAM)/.installed
	mkdir -p $(dir $(MI_TEMPLATE))
	$(VENV_SAM)/bin/python tools/managed_instances.py template.yaml $(MI_TEMPLATE)

# Every target installs what it needs into the project (.tools/, ignored by
# git), starts its servers on 127.0.0.1 with free ports, and stops them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
PYTHON ?= python3

TOOLS     := $(CURDIR)/.tools
VENV_MOTO := $(TOOLS)/venv-moto
VENV_SAM  := $(TOOLS)/venv-sam
RIE       := $(TOOLS)/bin/aws-lambda-rie
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
PIP_FLAGS := -q --disable-pip-version-check --no-input

.PHONY: test unit integration demo walkthrough vet fmt-check tools clean

## test: every check and every test (what .ci/run calls)
test: fmt-check vet tools
	IDEM_REQUIRE_MOTO=1 tools/with-moto.sh $(GO) test -race -count=1 -timeout 15m ./...

## unit: the hermetic tests only (minidyn in-process; moto tests skip)
unit:
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(find . -path ./.tools -prune -o -name '*.go' -print)); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

tools: $(VENV_MOTO)/.installed

$(VENV_MOTO)/.installed: tools/requirements-moto.txt
	rm -rf $(VENV_MOTO)
	$(PYTHON) -m venv $(VENV_MOTO)
	$(VENV_MOTO)/bin/pip install $(PIP_FLAGS) -r $<
	touch $@

$(VENV_SAM)/.installed: tools/requirements-sam.txt
	rm -rf $(VENV_SAM)
	$(PYTHON) -m venv $(VENV_SAM)
	$(VENV_SAM)/bin/pip install $(PIP_FLAGS) -r $<
	touch $@

$(RIE):
	mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

walkthrough:
	$(GO) run ./cmd/walkthrough

demo: walkthrough

clean:
	rm -rf $(TOOLS) .aws-sam bin

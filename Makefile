# Every target installs what it needs into the project (.tools/, ignored by git).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

.PHONY: test unit demo walkthrough vet fmt-check

test: fmt-check vet unit

unit:
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(find . -path ./.tools -prune -o -name '*.go' -print)); \
	if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

walkthrough:
	$(GO) run ./cmd/walkthrough

demo: walkthrough

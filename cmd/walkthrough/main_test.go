package main

import (
	"strings"
	"testing"
)

func TestWalkthroughPrintsSeedOutcomes(t *testing.T) {
	var b strings.Builder
	if err := run(&b); err != nil {
		t.Fatal(err)
	}
	// Columns are padded: compare with single spaces.
	out := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{
		"transient then success evt:release-42:notify executed",
		"[10ms]",
		"replayed {\"sent\":true}",
		"KEY_REUSED",
		"INVALID_KEY",
		"PERMANENT_FAILURE: 404 from downstream",
		"RETRY_EXHAUSTED",
		"[10ms 20ms]",
		"no per-key cap (default) evt:release-47:notify released, back to the queue: TRANSIENT_FAILURE",
		"in progress (retry later)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("walkthrough output lacks %q:\n%s", want, out)
		}
	}
}

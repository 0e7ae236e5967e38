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
	out := b.String()
	for _, want := range []string{
		"transient then success     evt:release-42:notify  executed",
		"[10ms]",
		"replayed {\"sent\":true}",
		"KEY_REUSED",
		"INVALID_KEY",
		"PERMANENT_FAILURE: 404 from downstream",
		"RETRY_EXHAUSTED",
		"[10ms 20ms]",
		"in progress (retry later)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("walkthrough output lacks %q:\n%s", want, out)
		}
	}
}

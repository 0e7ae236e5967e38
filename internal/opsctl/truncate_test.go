package opsctl

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCutsMarkTheCutOnACharacterBoundary pins opsctl's two cuts, both made
// with idem.Truncate: short (a table cell: one line, n bytes, "…") and an
// audit entry's reason (maxReason bytes, "…").
func TestCutsMarkTheCutOnACharacterBoundary(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"fits", 4, "fits"},
		{"two\n  lines\tand tabs", 100, "two lines and tabs"},
		{"abcdef", 3, "abc…"},
		{"aé€b", 3, "aé…"},  // the cut at 3 falls inside €: back to 'é'
		{"aé€b", 2, "a…"},   // inside é
		{"a😀b", 4, "a…"},    // inside the four-byte 😀
		{"\t😀 x", 6, "😀 x"}, // white space collapses before the length is judged
	} {
		if got := short(tc.s, tc.n); got != tc.want {
			t.Errorf("short(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	reason := strings.Repeat("a", maxReason-1) + "é and more"
	raw, err := appendAudit("", AuditEntry{Op: "release", Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	var entries []AuditEntry
	if err := json.Unmarshal([]byte(raw), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("audit %q: %v", raw, err)
	}
	if got, want := entries[0].Reason, strings.Repeat("a", maxReason-1)+"…"; got != want || !utf8.ValidString(got) {
		t.Errorf("reason cut to %q (%d bytes), want %d a's and …", got, len(got), maxReason-1)
	}
}

package idem

import (
	"encoding/hex"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, s string
		n       int
		want    string
	}{
		{"fits", "hello", 5, "hello"},
		{"shorter than n", "hi", 10, "hi"},
		{"ascii cut", "hello", 3, "hel"},
		{"zero", "hello", 0, ""},
		{"negative counts as zero", "hello", -1, ""},
		{"empty", "", 3, ""},
		{"cut inside a two-byte character backs off", "aé", 2, "a"},
		{"cut after a two-byte character keeps it", "aéb", 3, "aé"},
		{"cut inside a four-byte character backs off", "a😀", 4, "a"},
		{"cut inside a three-byte character at the start", "€uro", 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q, not valid UTF-8", tc.s, tc.n, got)
			}
		})
	}
}

func TestNewTokenIsFreshHex(t *testing.T) {
	a, b := NewToken(), NewToken()
	if a == b {
		t.Fatalf("two tokens are equal: %q", a)
	}
	for _, tok := range []string{a, b} {
		if raw, err := hex.DecodeString(tok); err != nil || len(raw) != 16 {
			t.Errorf("token %q: got %d bytes (err %v), want 16 bytes of hex", tok, len(raw), err)
		}
	}
}

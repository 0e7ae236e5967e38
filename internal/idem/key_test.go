package idem_test

import (
	"testing"

	"github.com/oncely/oncely/internal/idem"
)

func TestJoinKey(t *testing.T) {
	tests := []struct {
		name  string
		parts []string
		want  string
		code  idem.Code
	}{
		{"default shape", []string{"evt", "release-42", "notify"}, "evt:release-42:notify", ""},
		{"the id may hold the separator", []string{"evt", "urn:uuid:6e8bc430", "notify"}, "evt:urn:uuid:6e8bc430:notify", ""},
		{"two parts", []string{"evt", "a:b"}, "evt:a:b", ""},
		{"the action may not", []string{"evt", "a1-col", "x:notify"}, "", idem.CodeInvalidAction},
		{"the prefix may not", []string{"e:vt", "a1", "notify"}, "", idem.CodeInvalidKey},
		{"a middle part may not", []string{"evt", "tenant", "a:b", "notify"}, "", idem.CodeInvalidKey},
		{"empty id", []string{"evt", "", "notify"}, "", idem.CodeKeyMissing},
		{"empty action", []string{"evt", "id-1", ""}, "", idem.CodeKeyMissing},
		{"no parts", nil, "", idem.CodeKeyMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idem.JoinKey(tt.parts...)
			if got != tt.want || errCode(err) != tt.code {
				t.Errorf("JoinKey(%q) = %q, %v; want %q, code %q", tt.parts, got, err, tt.want, tt.code)
			}
		})
	}
	// The ambiguity the rule exists for: these two events must not share a key.
	a, errA := idem.JoinKey("evt", "a1-col:x", "notify")
	b, errB := idem.JoinKey("evt", "a1-col", "x:notify")
	if errA != nil || errB == nil || a == b {
		t.Errorf("(a1-col:x, notify) = %q %v and (a1-col, x:notify) = %q %v; want the first accepted and the second refused", a, errA, b, errB)
	}
}

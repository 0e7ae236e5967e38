package fakewebhook_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

func TestRulesAnswerAClassOfEvents(t *testing.T) {
	s := fakewebhook.New()
	hs := httptest.NewServer(s)
	defer hs.Close()
	do := func(method, path, key, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do("PUT", "/rules", "", `[{"match":"evt:*:refund","status":422}]`); got != 204 {
		t.Fatalf("PUT /rules got %d, want 204", got)
	}
	if got := do("PUT", "/rules", "", `[{"match":"evt:[:refund","status":422}]`); got != 400 {
		t.Errorf("PUT /rules with a malformed pattern got %d, want 400", got)
	}
	tests := []struct {
		key, when string
		want      int
	}{
		{"evt:o-1:refund", "rule set", 422},
		{"evt:o-1:notify", "rule set", 202},
	}
	for _, tt := range tests {
		if got := do("POST", "/webhook", tt.key, "{}"); got != tt.want {
			t.Errorf("%s with the %s: got %d, want %d", tt.key, tt.when, got, tt.want)
		}
	}
	s.Script("evt:o-1:refund", fakewebhook.Reply{Status: 503})
	if got := do("POST", "/webhook", "evt:o-1:refund", "{}"); got != 503 {
		t.Errorf("a scripted reply under a rule got %d, want the script's 503", got)
	}
	if got := do("DELETE", "/rules", "", ""); got != 204 {
		t.Fatalf("DELETE /rules got %d, want 204", got)
	}
	if got := do("POST", "/webhook", "evt:o-1:refund", "{}"); got != 202 {
		t.Errorf("after DELETE /rules got %d, want 202", got)
	}
	resp, err := http.Get(hs.URL + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string][]int
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int{"evt:o-1:refund": {422, 503, 202}, "evt:o-1:notify": {202}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /deliveries (-want +got):\n%s", diff)
	}
}

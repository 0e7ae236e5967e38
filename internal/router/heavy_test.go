package router_test

import (
	"context"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/canonjson"
)

// deepEvent is an event whose payload nests levels deep (the event's own
// object included) around a string of 128 KiB: the shape whose fingerprint
// used to cost depth × size (canonjson's allocation test takes 1 MiB).
func deepEvent(id string, levels int) string {
	return `{"id":"` + id + `","action":"notify","x":` + strings.Repeat(`{"a":`, levels-1) +
		`"` + strings.Repeat("x", 128<<10) + `"` + strings.Repeat("}", levels-1) + "}"
}

// TestHeavyBodies: the deepest body accepted runs as any event does; one
// level deeper is INVALID_PAYLOAD, a poison note on SQS (acknowledged, never
// retried) and a 400 on the API (no Retry-After: retrying cannot help).
func TestHeavyBodies(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ok, tooDeep := deepEvent("deep-ok", canonjson.MaxDepth), deepEvent("deep-no", canonjson.MaxDepth+1)
	if f := failed(h.sqs(ctx, false, msg{id: "m-ok", body: ok}, msg{id: "m-deep", body: tooDeep})); len(f) != 0 {
		t.Fatalf("failures %v; want both acknowledged: one executed, one noted as poison", f)
	}
	if a, b := h.down.Count("evt:deep-ok:notify"), h.down.Count("evt:deep-no:notify"); a != 1 || b != 0 {
		t.Errorf("deliveries: %d of the deepest accepted body, %d of the deeper one; want 1 and 0", a, b)
	}
	note := h.item(namespace + "#poison#m-deep")
	if attrS(note, "reason") != "INVALID_PAYLOAD" || !strings.Contains(attrS(note, "detail"), "deeper than 1000 levels") {
		t.Errorf("poison note %v; want INVALID_PAYLOAD saying the body nests deeper than 1000 levels", note)
	}
	resp := h.api(ctx, apiRequest(t, "deep-api-0001", tooDeep))
	if resp.StatusCode != 400 || problemCode(t, resp) != "INVALID_PAYLOAD" || resp.Headers["Retry-After"] != "" {
		t.Errorf("API: %d %v %.200s; want 400 INVALID_PAYLOAD without Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
	if resp := h.api(ctx, apiRequest(t, "deep-api-0002", ok)); resp.StatusCode != 200 {
		t.Errorf("API, the deepest accepted body: %d %.200s; want 200", resp.StatusCode, resp.Body)
	}
}

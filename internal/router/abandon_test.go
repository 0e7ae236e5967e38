package router_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestAnAbandonedActionIsCounted: a record whose action ignores its
// context is answered before the invocation's deadline, back to the
// queue, and counted by the invocation's metrics document (abandoned).
func TestAnAbandonedActionIsCounted(t *testing.T) {
	h := newHarness(t)
	deadline := time.Now().Add(3 * time.Second) // default budget: abandoned 2.125 s from now
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp := h.sqs(ctx, false, msg{id: "m-ign", body: event("ign-1", "notify", `"ignore_ctx":true`)}, msg{id: "m-ok", body: event("ign-ok", "notify")})
	if now := time.Now(); !now.Before(deadline) {
		t.Fatalf("answered %v after the deadline; want before it", now.Sub(deadline))
	}
	if got := failed(resp); len(got) != 1 || got[0] != "m-ign" {
		t.Errorf("failures %v; want only the abandoned record back to the queue", got)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(h.metrics.String()), &doc); err != nil {
		t.Fatalf("metrics %q: %v", h.metrics.String(), err)
	}
	if doc["abandoned"] != 1.0 || doc["executed"] != 1.0 {
		t.Errorf("metrics %v; want abandoned 1, executed 1", doc)
	}
}

package router_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

// exitAfter checks that out is an answer after which the process exits,
// and returns it with the answer it carries.
func exitAfter(t *testing.T, out any) (*router.ExitAfter, events.SQSEventResponse) {
	t.Helper()
	a, ok := out.(*router.ExitAfter)
	if !ok {
		t.Fatalf("Invoke returned %T; want *router.ExitAfter (the last invocation in flight past the bound)", out)
	}
	if a.ContentType() != "application/json" {
		t.Errorf("content type %q; want application/json", a.ContentType())
	}
	// aws-lambda-go posts an io.Reader as it is only when the value's own
	// JSON encoding is "{}".
	if b, err := json.Marshal(a); err != nil || string(b) != "{}" {
		t.Errorf("the wrapper's own JSON is %s, %v; want {}", b, err)
	}
	raw, err := io.ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		t.Fatalf("the answer %q is not an SQS batch response: %v", raw, err)
	}
	return a, resp
}

// TestTheProcessExitsBetweenInvocationsPastTheAbandonedBound: past
// MaxAbandoned, the invocation that leaves none in flight answers with an
// ExitAfter whose Close (aws-lambda-go's, once the answer is posted) calls
// Exit; never while another invocation is in flight, and never below the
// bound.
func TestTheProcessExitsBetweenInvocationsPastTheAbandonedBound(t *testing.T) {
	h := newHarness(t)
	var running, exits atomic.Int64
	h.router.Abandoned = func() int { return int(running.Load()) }
	h.router.MaxAbandoned = 2
	h.router.Exit = func() { exits.Add(1) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	batch := func(id string) []byte { return loadSQS(t, false, msg{id: "m-" + id, body: event(id, "notify")}) }

	running.Store(2) // at the bound, not past it
	if out, err := h.router.Invoke(ctx, batch("exit-1")); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(events.SQSEventResponse); !ok {
		t.Fatalf("at the bound: Invoke returned %T; want the plain answer", out)
	}

	running.Store(3)
	// Another invocation in flight: this answer is plain.
	hold := make(chan struct{})
	h.down.Script("evt:exit-held:notify", fakewebhook.Reply{Hold: hold})
	held := make(chan any, 1)
	go func() {
		out, err := h.router.Invoke(ctx, batch("exit-held"))
		if err != nil {
			t.Error(err)
		}
		held <- out
	}()
	for limit := time.Now().Add(10 * time.Second); h.down.Count("evt:exit-held:notify") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the held invocation's delivery never arrived")
		}
	}
	out, err := h.router.Invoke(ctx, batch("exit-2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(events.SQSEventResponse); !ok {
		t.Fatalf("with another invocation in flight: Invoke returned %T; want the plain answer", out)
	}
	// The held one is the last in flight: its answer exits once posted.
	close(hold)
	last, resp := exitAfter(t, <-held)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("the last answer %+v; want the batch acknowledged", resp)
	}
	if n := exits.Load(); n != 0 {
		t.Fatalf("%d exits before the answer was posted; want none", n)
	}
	// An invocation that starts before the post is over keeps the process.
	hold = make(chan struct{})
	h.down.Script("evt:exit-late:notify", fakewebhook.Reply{Hold: hold})
	go func() {
		out, err := h.router.Invoke(ctx, batch("exit-late"))
		if err != nil {
			t.Error(err)
		}
		held <- out
	}()
	for limit := time.Now().Add(10 * time.Second); h.down.Count("evt:exit-late:notify") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the late invocation's delivery never arrived")
		}
	}
	_ = last.Close()
	if n := exits.Load(); n != 0 {
		t.Fatalf("%d exits with an invocation in flight; want none", n)
	}
	close(hold)
	last, _ = exitAfter(t, <-held)
	_ = last.Close()
	_ = last.Close()
	if n := exits.Load(); n != 1 {
		t.Errorf("%d exits after the last answer was posted; want exactly 1", n)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "exiting between invocations") {
		t.Errorf("no log line says why the process exits")
	}
}

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

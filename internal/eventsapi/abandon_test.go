package eventsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// syncBuffer is a log sink an abandoned action's late lines may write to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// TestAnActionThatIgnoresItsContextGets503WithRetryAfter: the request is
// answered before its deadline, 503 with a Retry-After and the fixed
// sentence, though the action is still running; once the action returns,
// its result is recorded under its own token and the caller's retry with
// the same key gets it, replayed.
func TestAnActionThatIgnoresItsContextGets503WithRetryAfter(t *testing.T) {
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	store := memstore.New()
	// Large reserves: seconds between the abandonment and the deadline.
	// An abandoned action may still be sending: the caller waits at least
	// the engine's pause after a sent request.
	const pause = 10 * time.Second
	engine, err := idem.New(idem.Options{Store: store, Lease: time.Minute, Logger: logger, Retry: idem.RetryPolicy{AttemptsPerDelivery: 1},
		Budget: idem.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}, SentPause: pause})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	act := func(context.Context, action.Event) (action.Result, error) {
		<-release // ignores its context
		return action.Result{Status: 201, Body: []byte(`{"late":true}`)}, nil
	}
	h, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Action: act, MaxBodyBytes: 1024, JWTIssuer: issuer, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(6 * time.Second) // work deadline: 2 s from now
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Without abandonment the request waits for the action: let it return
	// after the deadline, so that the test fails instead of hanging.
	stop := time.AfterFunc(time.Until(deadline)+time.Second, open)
	defer stop.Stop()
	resp, res := h.Handle(ctx, request())
	if now := time.Now(); !now.Before(deadline) {
		t.Fatalf("answered %v after the invocation's deadline; want before it", now.Sub(deadline))
	}
	var doc struct{ Code, Detail string }
	_ = json.Unmarshal([]byte(resp.Body), &doc)
	if resp.StatusCode != 503 || doc.Code != string(idem.CodeAbandoned) || res.Label != idem.LabelAbandoned {
		t.Fatalf("got %d %s (label %s); want 503 with code ABANDONED, label abandoned", resp.StatusCode, resp.Body, res.Label)
	}
	if secs, err := strconv.Atoi(resp.Headers["Retry-After"]); err != nil || time.Duration(secs)*time.Second < pause {
		t.Errorf("Retry-After %q; want whole seconds, at least the %v pause (the lease's time left, which runs the pause past the deadline)", resp.Headers["Retry-After"], pause)
	}
	if doc.Detail != "the action did not finish in time; retry later with the same key" {
		t.Errorf("detail %q; want the fixed sentence", doc.Detail)
	}
	stop.Stop()
	open()
	for limit := time.Now().Add(10 * time.Second); engine.Abandoned() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the abandoned action's late return was never recorded")
		}
	}
	again, _ := h.Handle(context.Background(), request())
	if again.StatusCode != 201 || again.Body != `{"late":true}` || again.Headers["Idempotent-Replayed"] != "true" {
		t.Errorf("the retry got %d %v %s; want the late result, replayed", again.StatusCode, again.Headers, again.Body)
	}
}

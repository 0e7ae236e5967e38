package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// waitUntil polls cond every few milliseconds, failing the test after
// limit (a generous bound: the machine may be loaded).
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
	}
}

// TestDoWorkAbandonsAnActionThatIgnoresItsContext: an action that never
// looks at its context cannot hold the call past the invocation's
// deadline. DoWork returns once the action's context has ended plus the
// budget's grace, with a retryable outcome that is not stored, writes
// nothing (the record stays IN_PROGRESS under its token), and counts the
// action as abandoned until it returns; its late success is then recorded
// under its own token, which nobody took over.
func TestDoWorkAbandonsAnActionThatIgnoresItsContext(t *testing.T) {
	// Large reserves leave seconds between the abandonment and the
	// deadline, so that a loaded machine cannot make the test fail.
	budget := idem.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}
	f := newFixture(t, func(o *idem.Options) { o.Budget = budget })
	deadline := time.Now().Add(5 * time.Second) // work deadline: 1 s from now
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	release := make(chan struct{})
	// Without abandonment DoWork would wait for the action: let it return
	// after the deadline, so that the test fails instead of hanging.
	stop := time.AfterFunc(time.Until(deadline)+time.Second, func() { close(release) })
	defer stop.Stop()
	r := req(t, "evt:abandon-1:notify", `{"id":1}`)
	out := f.engine.DoWork(ctx, r, func(context.Context) ([]byte, idem.Effects, error) {
		<-release // ignores its context
		return []byte(`"late"`), nil, nil
	})
	if now := time.Now(); !now.Before(deadline) {
		t.Fatalf("DoWork returned %v after the invocation's deadline; want before it", now.Sub(deadline))
	}
	if out.Err == nil || out.Err.Code != idem.CodeAbandoned || !out.Err.Retryable || out.Stored || out.Label() != idem.LabelAbandoned || out.Label().Acknowledged() {
		t.Fatalf("outcome %+v (label %s); want ABANDONED, retryable, not stored, not acknowledged", out, out.Label())
	}
	if out.Err.RetryAfter <= 0 {
		t.Errorf("RetryAfter %v; want the time left on the lease", out.Err.RetryAfter)
	}
	rec, found, err := f.store.Get(context.Background(), r.Key, f.clock.Now())
	if err != nil || !found || rec.Status != idem.StatusInProgress || rec.Attempts != 1 {
		t.Fatalf("record after the abandonment %+v (found %v, %v); want IN_PROGRESS, attempt 1, untouched", rec, found, err)
	}
	if n := f.engine.Abandoned(); n != 1 {
		t.Errorf("Abandoned() = %d while the action runs; want 1", n)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "action abandoned") || !strings.Contains(logs, "key="+r.Key) {
		t.Errorf("logs %q; want an \"action abandoned\" line with the key", logs)
	}
	stop.Stop()
	close(release)
	waitUntil(t, 10*time.Second, "the abandoned action's return was never recorded", func() bool { return f.engine.Abandoned() == 0 })
	rec, _, err = f.store.Get(context.Background(), r.Key, f.clock.Now())
	if err != nil || rec.Status != idem.StatusSucceeded || string(rec.Result) != `"late"` {
		t.Errorf("record after the late return %+v, %v; want SUCCEEDED with the late result (its token was still the record's)", rec, err)
	}
}

// TestDoWorkWaitsForAnActionThatReturnsWithinTheGrace: an action that
// honours its context a little late (within the grace) is not abandoned:
// its error is recorded as usual.
func TestDoWorkWaitsForAnActionThatReturnsWithinTheGrace(t *testing.T) {
	budget := idem.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}
	f := newFixture(t, func(o *idem.Options) { o.Budget = budget; o.Retry.AttemptsPerDelivery = 1 })
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(5*time.Second))
	defer cancel()
	out := f.engine.DoWork(ctx, req(t, "evt:grace-1:notify", `{"id":1}`), func(ctx context.Context) ([]byte, idem.Effects, error) {
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // well inside the 500 ms grace
		return nil, nil, idem.Transient(ctx.Err())
	})
	if out.Err == nil || out.Err.Code != idem.CodeTransientFailure || f.engine.Abandoned() != 0 {
		t.Fatalf("outcome %+v, %d abandoned; want TRANSIENT_FAILURE recorded, none abandoned", out, f.engine.Abandoned())
	}
}

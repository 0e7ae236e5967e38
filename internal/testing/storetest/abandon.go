package storetest

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// RunAbandonTests checks, with the engine over a store, that an action the
// engine abandoned (it ignored its context past the work deadline) stays
// fenced: once a later delivery has taken the key over, the abandoned
// action's late return, a success or a failure, cannot overwrite the new
// owner's record. It runs in real time (a few seconds): the engine's
// deadlines are the context's.
func RunAbandonTests(t *testing.T, newStore func(t *testing.T) idem.Store) {
	for _, tt := range []struct {
		name string
		late func() ([]byte, idem.Effects, error)
	}{
		{"late success", func() ([]byte, idem.Effects, error) { return []byte(`"late"`), nil, nil }},
		{"late permanent failure", func() ([]byte, idem.Effects, error) {
			return nil, nil, idem.Permanent(errors.New("refused late"))
		}},
		{"late transient failure", func() ([]byte, idem.Effects, error) {
			return nil, nil, idem.Transient(errors.New("failed late"))
		}},
	} {
		t.Run("LateFinishAfterTakeOverIsFenced/"+tt.name, func(t *testing.T) {
			t.Parallel()
			testLateFinishFenced(t, newStore(t), tt.late)
		})
	}
}

// startClock is an engine's clock that stands still from hold until the
// action starts (resume), and is the real clock otherwise. The engine
// checks that its work window is worth starting twice, before and after
// the reservation (Budget.CanStart): with the clock held, however long the
// store calls take on a loaded machine (under -race, three subtests at
// once, against a DynamoDB emulator), the engine sees the window it
// reserved whole and starts the action, so a slow reservation cannot turn
// the case's ABANDONED into DEADLINE. The action's own deadline is the
// context's, in real time: it is abandoned as before.
type startClock struct{ held atomic.Pointer[time.Time] }

func (c *startClock) Now() time.Time {
	if t := c.held.Load(); t != nil {
		return *t
	}
	return time.Now()
}

func (c *startClock) hold() {
	now := time.Now()
	c.held.Store(&now)
}

func (c *startClock) resume() { c.held.Store(nil) }

func testLateFinishFenced(t *testing.T, s idem.Store, late func() ([]byte, idem.Effects, error)) {
	newEngine := func(clock *startClock) *idem.Engine {
		// A 1 s lease; reserves of 500 ms: the first owner's work deadline
		// is 500 ms after it starts, its abandonment 125 ms later.
		e, err := idem.New(idem.Options{Store: s, Lease: time.Second, Retry: idem.RetryPolicy{AttemptsPerDelivery: 1},
			Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var firstClock, secondClock startClock
	first, second := newEngine(&firstClock), newEngine(&secondClock)
	key := uniqueKey(t)
	r, err := idem.NewRequest(key, []byte(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	release := make(chan struct{})
	returned := make(chan idem.Outcome, 1)
	firstClock.hold()
	go func() {
		returned <- first.DoWork(ctx, r, func(context.Context) ([]byte, idem.Effects, error) {
			firstClock.resume()
			<-release // ignores its context
			return late()
		})
	}()
	var out idem.Outcome
	select {
	case out = <-returned:
	case <-time.After(10 * time.Second): // the lease is 1 s
		close(release)
		t.Fatal("the first owner's DoWork is still waiting for an action that ignores its context, 10 s after its 1 s lease began")
	}
	if out.Err == nil || out.Err.Code != idem.CodeAbandoned || out.Stored {
		close(release)
		t.Fatalf("the first owner: %+v; want ABANDONED, not stored", out)
	}
	rec, found, err := s.Get(context.Background(), key, time.Now())
	if err != nil || !found || rec.Status != idem.StatusInProgress {
		close(release)
		t.Fatalf("after the abandonment: %+v, %v, %v; want IN_PROGRESS", rec, found, err)
	}
	// A redelivery after the lease's end takes the key over and completes.
	time.Sleep(time.Until(rec.LeaseUntil.Add(20 * time.Millisecond)))
	secondClock.hold()
	again := second.DoWork(ctx, r, func(context.Context) ([]byte, idem.Effects, error) {
		secondClock.resume()
		return []byte(`"second"`), nil, nil
	})
	if again.Err != nil || again.Replayed || string(again.Result) != `"second"` {
		close(release)
		t.Fatalf("the take-over: %+v; want it to run and succeed", again)
	}
	close(release)
	for limit := time.Now().Add(10 * time.Second); first.Abandoned() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the abandoned action's late return was never settled")
		}
	}
	rec = mustGet(t, s, key, time.Now())
	if rec.Status != idem.StatusSucceeded || string(rec.Result) != `"second"` || rec.Attempts != 2 || rec.ErrorCode != "" {
		t.Errorf("after the late return: %s %q attempts %d code %q; want the new owner's SUCCEEDED \"second\", attempts 2", rec.Status, rec.Result, rec.Attempts, rec.ErrorCode)
	}
}

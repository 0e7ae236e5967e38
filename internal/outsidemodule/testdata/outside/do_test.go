package outside_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/oncelytest"
)

// caller runs fn for (key, payload) the way a user would: with Do, or
// through a handler made by Wrap.
type caller func(e *oncely.Engine, key string, payload int, fn func(context.Context) (string, error)) (string, error)

type event struct {
	Key     string
	Payload int
}

var callers = map[string]caller{
	"Do": func(e *oncely.Engine, key string, payload int, fn func(context.Context) (string, error)) (string, error) {
		return oncely.Do(context.Background(), e, key, payload, fn)
	},
	"Wrap": func(e *oncely.Engine, key string, payload int, fn func(context.Context) (string, error)) (string, error) {
		h := oncely.Wrap(e, func(ev event) (string, error) { return ev.Key, nil },
			func(ctx context.Context, _ event) (string, error) { return fn(ctx) })
		return h(context.Background(), event{Key: key, Payload: payload})
	},
}

func testEngine(t *testing.T) (*oncely.Engine, *oncelytest.Store) {
	t.Helper()
	s := oncelytest.NewStore()
	e, err := oncely.New(s, oncely.Options{Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

func TestOneRunThenAReplay(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			e, _ := testEngine(t)
			runs := 0
			fn := func(context.Context) (string, error) { runs++; return "receipt-1", nil }
			for i := range 2 {
				got, err := call(e, "order:4004:charge", 500, fn)
				if err != nil || got != "receipt-1" {
					t.Fatalf("call %d: %q, %v; want the receipt", i+1, got, err)
				}
			}
			if runs != 1 {
				t.Errorf("%d runs; want 1", runs)
			}
		})
	}
}

func TestAReusedKeyIsRefused(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			e, _ := testEngine(t)
			runs := 0
			fn := func(context.Context) (string, error) { runs++; return "ok", nil }
			if _, err := call(e, "order:5005:charge", 500, fn); err != nil {
				t.Fatal(err)
			}
			_, err := call(e, "order:5005:charge", 700, fn)
			if !errors.Is(err, oncely.ErrKeyReused) || runs != 1 {
				t.Errorf("another payload under the key: %v after %d runs; want KEY_REUSED and 1 run", err, runs)
			}
		})
	}
}

func TestAMarkedTransientErrorLeavesTheKeyFree(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			e, s := testEngine(t)
			runs := 0
			fn := func(context.Context) (string, error) {
				runs++
				if runs == 1 {
					return "", oncely.Transient(errors.New("503 from the payment service"))
				}
				return "paid", nil
			}
			_, err := call(e, "order:6006:charge", 500, fn)
			var oe *oncely.Error
			if !errors.As(err, &oe) || oe.Code != oncely.CodeTransientFailure || !oe.Retryable || errors.Is(err, oncely.ErrReplayed) {
				t.Fatalf("first call: %v; want a retryable TRANSIENT_FAILURE", err)
			}
			rec, _, _ := s.Get(context.Background(), "order:6006:charge", time.Now())
			if rec.Status != oncely.StatusFailed || !rec.Retryable {
				t.Fatalf("record %s retryable %v; want a released (retryable) failure", rec.Status, rec.Retryable)
			}
			got, err := call(e, "order:6006:charge", 500, fn)
			if err != nil || got != "paid" || runs != 2 {
				t.Errorf("next delivery: %q, %v after %d runs; want it run again and paid", got, err, runs)
			}
		})
	}
}

func TestAPermanentFailureIsReplayedWithoutRunning(t *testing.T) {
	for name, call := range callers {
		t.Run(name, func(t *testing.T) {
			e, _ := testEngine(t)
			runs := 0
			fn := func(context.Context) (string, error) {
				runs++
				return "", oncely.PermanentCode("CARD_DECLINED", errors.New("insufficient funds"))
			}
			_, first := call(e, "order:7007:charge", 500, fn)
			_, again := call(e, "order:7007:charge", 500, fn)
			var oe *oncely.Error
			if !errors.As(again, &oe) || oe.Code != "CARD_DECLINED" || !errors.Is(again, oncely.ErrReplayed) || errors.Is(first, oncely.ErrReplayed) {
				t.Errorf("first %v, then %v; want CARD_DECLINED, then the same replayed", first, again)
			}
			if runs != 1 {
				t.Errorf("%d runs; want 1", runs)
			}
		})
	}
}

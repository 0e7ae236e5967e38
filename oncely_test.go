package oncely_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/testing/memstore"
)

func newEngine(t *testing.T, o oncely.Options) *oncely.Engine {
	t.Helper()
	e, err := oncely.New(memstore.New(), o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type receipt struct{ ID string }

func TestDoRunsOnceAndReplaysTheStoredResult(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	runs := 0
	charge := func(context.Context) (receipt, error) { runs++; return receipt{ID: "r-1"}, nil }
	for i := range 3 {
		got, err := oncely.Do(context.Background(), e, "order:1001:charge", map[string]int{"cents": 500}, charge)
		if err != nil || got.ID != "r-1" {
			t.Fatalf("call %d: %+v, %v; want the receipt", i+1, got, err)
		}
	}
	if runs != 1 {
		t.Errorf("%d runs; want 1", runs)
	}
}

func TestDoRefusesAKeyReusedWithAnotherPayload(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	fn := func(context.Context) (int, error) { return 1, nil }
	if _, err := oncely.Do(context.Background(), e, "order:1002:charge", 500, fn); err != nil {
		t.Fatal(err)
	}
	_, err := oncely.Do(context.Background(), e, "order:1002:charge", 700, fn)
	if !errors.Is(err, oncely.ErrKeyReused) {
		t.Errorf("another payload: %v; want KEY_REUSED", err)
	}
}

func TestDoTransientFailureLeavesTheKeyFree(t *testing.T) {
	e := newEngine(t, oncely.Options{Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}})
	runs := 0
	_, err := oncely.Do(context.Background(), e, "order:1003:charge", 1, func(context.Context) (int, error) {
		runs++
		return 0, oncely.Transient(errors.New("503 from the payment service"))
	})
	var oe *oncely.Error
	if !errors.As(err, &oe) || oe.Code != oncely.CodeTransientFailure || !oe.Retryable {
		t.Fatalf("transient failure: %v; want a retryable TRANSIENT_FAILURE", err)
	}
	got, err := oncely.Do(context.Background(), e, "order:1003:charge", 1, func(context.Context) (int, error) { runs++; return 42, nil })
	if err != nil || got != 42 || runs != 2 {
		t.Errorf("next call: %d, %v after %d runs; want it to run again and succeed", got, err, runs)
	}
}

func TestDoPermanentFailureIsReplayedWithoutRunning(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	runs := 0
	fn := func(context.Context) (int, error) {
		runs++
		return 0, oncely.PermanentCode("CARD_DECLINED", errors.New("card 4242 declined by the issuer"))
	}
	_, first := oncely.Do(context.Background(), e, "order:1004:charge", 1, fn)
	_, again := oncely.Do(context.Background(), e, "order:1004:charge", 1, fn)
	if runs != 1 {
		t.Fatalf("%d runs; want 1", runs)
	}
	if errors.Is(first, oncely.ErrReplayed) || !errors.Is(again, oncely.ErrReplayed) {
		t.Errorf("ErrReplayed matches the first failure: %v, the replay: %v; want only the replay", errors.Is(first, oncely.ErrReplayed), errors.Is(again, oncely.ErrReplayed))
	}
	var oe *oncely.Error
	if !errors.As(again, &oe) || oe.Code != "CARD_DECLINED" || strings.Contains(oe.Message, "4242") {
		t.Errorf("replay: %v; want code CARD_DECLINED with the fixed sentence, not the original text", again)
	}
}

func TestAShortKeyIsRefusedWithAHint(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	_, err := oncely.Do(context.Background(), e, "order-1", 1, func(context.Context) (int, error) { t.Fatal("ran"); return 0, nil })
	if !errors.Is(err, oncely.ErrInvalidKey) || !strings.Contains(err.Error(), "oncely.Key") || !strings.Contains(err.Error(), "oncely.HashKey") {
		t.Errorf("got %v; want INVALID_KEY pointing at oncely.Key and oncely.HashKey", err)
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		parts []string
		want  string // "" : refused
	}{
		{[]string{"order", "1001", "charge"}, "order:1001:charge"},
		{[]string{"order", "", "charge"}, ""},
		{[]string{"order", "urn:uuid:1", "charge"}, ""},
		{[]string{"a", "b"}, ""}, // too short
		{[]string{"user", "a@b.example", "welcome"}, ""},
		{nil, ""},
	} {
		got, err := oncely.Key(tc.parts...)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("Key(%q) = %q, %v; want %q", tc.parts, got, err, tc.want)
		}
		if err != nil && !errors.Is(err, oncely.ErrInvalidKey) {
			t.Errorf("Key(%q) error %v; want INVALID_KEY", tc.parts, err)
		}
	}
}

func TestHashKeyIsValidAndUnambiguous(t *testing.T) {
	a, b := oncely.HashKey("ab", "c"), oncely.HashKey("a", "bc")
	if a == b {
		t.Errorf("HashKey(ab, c) == HashKey(a, bc) = %s", a)
	}
	if _, err := oncely.NewRequest(oncely.HashKey("user", "a@b.example", "welcome"), []byte(`{}`)); err != nil {
		t.Errorf("a hashed key is refused: %v", err)
	}
	// A stored format: the same parts give the same key in every version.
	if got, want := oncely.HashKey("user", "a@b.example"), "sha256:"; !strings.HasPrefix(got, want) || len(got) != 71 {
		t.Errorf("HashKey = %q; want sha256: and 64 hex digits", got)
	}
}

type order struct {
	ID         string
	Cents      int
	ReceivedAt string // differs between copies of one order
}

func TestWrapFingerprintsTheWholeEventUnlessToldOtherwise(t *testing.T) {
	key := func(o order) (string, error) { return oncely.Key("order", o.ID, "charge") }
	first, copyLater := order{ID: "1005", Cents: 500, ReceivedAt: "10:00"}, order{ID: "1005", Cents: 500, ReceivedAt: "10:05"}
	for _, tc := range []struct {
		name      string
		opts      []oncely.WrapOption[order]
		wantReuse bool
	}{
		{"whole event", nil, true},
		{"PayloadOf", []oncely.WrapOption[order]{oncely.PayloadOf(func(o order) any { return o.Cents })}, false},
		{"NoPayload", []oncely.WrapOption[order]{oncely.NoPayload[order]()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, oncely.Options{})
			runs := 0
			charge := oncely.Wrap(e, key, func(_ context.Context, o order) (receipt, error) { runs++; return receipt{ID: "r-" + o.ID}, nil }, tc.opts...)
			if _, err := charge(context.Background(), first); err != nil {
				t.Fatal(err)
			}
			got, err := charge(context.Background(), copyLater)
			if reused := errors.Is(err, oncely.ErrKeyReused); reused != tc.wantReuse {
				t.Errorf("a later copy: %+v, %v; want KEY_REUSED %v", got, err, tc.wantReuse)
			}
			if !tc.wantReuse && got.ID != "r-1005" {
				t.Errorf("a later copy got %+v; want the stored receipt", got)
			}
			if runs != 1 {
				t.Errorf("%d runs; want 1", runs)
			}
		})
	}
}

func TestWrapReportsAKeyFunctionsError(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	boom := errors.New("the order has no id")
	f := oncely.Wrap(e, func(order) (string, error) { return "", boom }, func(context.Context, order) (int, error) { return 0, nil })
	if _, err := f(context.Background(), order{}); !errors.Is(err, oncely.ErrInvalidKey) || !errors.Is(err, boom) {
		t.Errorf("got %v; want INVALID_KEY wrapping the key function's error", err)
	}
}

func TestClassifyHookMarksUnmarkedErrors(t *testing.T) {
	throttled := errors.New("ThrottlingException: rate exceeded")
	for _, tc := range []struct {
		name     string
		classify func(error) oncely.Class
		want     oncely.Code
	}{
		{"no hook: permanent", nil, oncely.CodePermanentFailure},
		{"hook: transient", func(err error) oncely.Class {
			if err == throttled {
				return oncely.ClassTransient
			}
			return oncely.ClassUnknown
		}, oncely.CodeTransientFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, oncely.Options{Classify: tc.classify, Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}})
			_, err := oncely.Do(context.Background(), e, "order:1006:charge", 1, func(context.Context) (int, error) { return 0, throttled })
			var oe *oncely.Error
			if !errors.As(err, &oe) || oe.Code != tc.want {
				t.Errorf("got %v; want %s", err, tc.want)
			}
		})
	}
}

// The hook judges an unmarked error before the engine's own rules, which
// call every timeout transient: a hook that knows the timed-out request
// may have been applied (awserr) is heard. A marked error is not offered.
func TestClassifyHookComesBeforeTheEnginesRules(t *testing.T) {
	timedOut := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	hook := func(err error) oncely.Class {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return oncely.ClassOutcomeUnknown
		}
		return oncely.ClassUnknown
	}
	for _, tc := range []struct {
		name string
		err  error
		want oncely.Code
	}{
		{"unmarked timeout", timedOut, oncely.CodeOutcomeUnknown},
		{"marked timeout", oncely.Transient(timedOut), oncely.CodeTransientFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, oncely.Options{Classify: hook, Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}})
			_, err := oncely.Do(context.Background(), e, "order:1008:"+strings.ReplaceAll(tc.name, " ", "-"), 1, func(context.Context) (int, error) { return 0, tc.err })
			var oe *oncely.Error
			if !errors.As(err, &oe) || oe.Code != tc.want {
				t.Errorf("got %v; want %s", err, tc.want)
			}
		})
	}
}

func TestKeyFromGivesTheWorksKey(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	got, err := oncely.Do(context.Background(), e, "order:1007:charge", 1, func(ctx context.Context) (string, error) {
		k, _ := oncely.KeyFrom(ctx)
		return k, nil
	})
	if err != nil || got != "order:1007:charge" {
		t.Errorf("KeyFrom = %q, %v; want the key", got, err)
	}
	if _, ok := oncely.KeyFrom(context.Background()); ok {
		t.Errorf("KeyFrom outside a run reports a key")
	}
}

func TestNewNeedsAStore(t *testing.T) {
	if _, err := oncely.New(nil, oncely.Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// An unmarked timeout or cut connection may come after the work's request
// reached its receiver: no second attempt in the call (which would send it
// again at once), and the key held off for SentPause. A refused dial sent
// nothing: retried in the call.
func TestUnmarkedTimeoutsAreNotRetriedInTheCall(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name      string
		err       error
		wantCalls int
		wantHold  bool
	}{
		{"a read that timed out", timeout, 1, true},
		{"a reset", fmt.Errorf("post: %w", syscall.ECONNRESET), 1, true},
		{"the context's end", context.DeadlineExceeded, 1, true},
		{"a refused dial", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, oncely.Options{SentPause: time.Minute, Retry: oncely.RetryPolicy{AttemptsPerDelivery: 3, Base: time.Millisecond, Max: time.Millisecond}})
			calls := 0
			_, err := oncely.Do(context.Background(), e, "order:1008:charge", 1, func(context.Context) (int, error) { calls++; return 0, tc.err })
			var oe *oncely.Error
			if !errors.As(err, &oe) || oe.Code != oncely.CodeTransientFailure || calls != tc.wantCalls {
				t.Fatalf("%v after %d calls; want TRANSIENT_FAILURE after %d", err, calls, tc.wantCalls)
			}
			if held := oe.RetryAfter >= time.Minute; held != tc.wantHold {
				t.Errorf("Retry-After %v; want the pause: %v", oe.RetryAfter, tc.wantHold)
			}
		})
	}
}

type named string

func (n named) String() string { return string(n) }

// A result that encodes but cannot decode back into R (an interface)
// fails its replays, never the call that ran.
func TestDoReturnsTheFreshResultAsItIs(t *testing.T) {
	e := newEngine(t, oncely.Options{})
	fn := func(context.Context) (fmt.Stringer, error) { return named("r-9"), nil }
	got, err := oncely.Do(context.Background(), e, "order:1009:charge", 1, fn)
	if err != nil || got == nil || got.String() != "r-9" {
		t.Fatalf("first call: %v, %v; want fn's own result", got, err)
	}
	if _, err := oncely.Do(context.Background(), e, "order:1009:charge", 1, fn); err == nil {
		t.Errorf("a replay into an interface succeeded; want the stored result refused")
	}
}

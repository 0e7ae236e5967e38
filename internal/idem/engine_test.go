package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
	"github.com/oncely/oncely/storetest"
)

// fakeClock is the engine's injected time: Sleep advances it and records
// the delay instead of sleeping.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newClock() *fakeClock { return &fakeClock{now: time.Now().Truncate(time.Millisecond)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

type fixture struct {
	clock  *fakeClock
	store  idem.Store
	engine *idem.Engine
	logs   *strings.Builder
}

// seedPolicy is the seed's: 3 attempts per delivery, 10ms base, no jitter,
// and no per-key cap (the product's default).
var seedPolicy = idem.RetryPolicy{AttemptsPerDelivery: 3, Base: 10 * time.Millisecond, Max: time.Second}

func newFixture(t *testing.T, mod ...func(*idem.Options)) *fixture {
	t.Helper()
	f := &fixture{clock: newClock(), store: memstore.New(), logs: &strings.Builder{}}
	o := idem.Options{
		Store:  f.store,
		Retry:  seedPolicy,
		Lease:  time.Minute,
		Now:    f.clock.Now,
		Sleep:  f.clock.Sleep,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: f.logs}, nil)),
	}
	for _, m := range mod {
		m(&o)
	}
	e, err := idem.New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.engine = e
	return f
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func req(t *testing.T, key, payload string) idem.Request {
	t.Helper()
	r, err := idem.NewRequest(key, []byte(payload))
	if err != nil {
		t.Fatalf("NewRequest(%q, %s): %v", key, payload, err)
	}
	return r
}

// counter is an action that counts its calls and follows a script of errors.
type counter struct {
	calls  atomic.Int64
	script []error // error for call i; calls beyond the script succeed
	result []byte
}

func (c *counter) run(ctx context.Context) ([]byte, error) {
	n := int(c.calls.Add(1))
	if n <= len(c.script) && c.script[n-1] != nil {
		return nil, c.script[n-1]
	}
	if c.result == nil {
		return []byte(`{"sent":true}`), nil
	}
	return c.result, nil
}

func errCode(err error) idem.Code {
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

var errBoom = errors.New("boom")

// --- The seed's scenarios ---

func TestSeed1TransientThenSuccess(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{idem.Transient(errBoom)}}
	out, err := f.engine.Do(context.Background(), req(t, "evt:release-42:notify", `{"id":"release-42"}`), act.run)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if out.Attempts != 2 || act.calls.Load() != 2 {
		t.Errorf("attempts %d, calls %d; want 2, 2", out.Attempts, act.calls.Load())
	}
	if diff := cmp.Diff([]time.Duration{10 * time.Millisecond}, out.Delays); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if rec := get(t, f, "evt:release-42:notify"); rec.Attempts != 2 || rec.Status != idem.StatusSucceeded {
		t.Errorf("record %s attempts %d; want SUCCEEDED 2", rec.Status, rec.Attempts)
	}
}

func TestSeed2DuplicateWithReorderedKeysReplays(t *testing.T) {
	f := newFixture(t)
	act := &counter{result: []byte(`{"delivered":1}`)}
	first, err := f.engine.Do(context.Background(), req(t, "evt:release-42:notify", `{"id":"release-42","n":1}`), act.run)
	if err != nil || first.Replayed {
		t.Fatalf("first Do: %+v %v", first, err)
	}
	second, err := f.engine.Do(context.Background(), req(t, "evt:release-42:notify", "{ \"n\" : 1,\n \"id\":\"release-42\" }"), act.run)
	if err != nil {
		t.Fatalf("second Do: %v", err)
	}
	if !second.Replayed || string(second.Result) != `{"delivered":1}` || act.calls.Load() != 1 {
		t.Errorf("second: replayed %v result %s calls %d; want replayed, stored result, 1 call", second.Replayed, second.Result, act.calls.Load())
	}
}

func TestSeed3SameKeyOtherPayloadIsKeyReused(t *testing.T) {
	f := newFixture(t)
	act := &counter{}
	if _, err := f.engine.Do(context.Background(), req(t, "evt:release-42:notify", `{"id":"release-42","v":1}`), act.run); err != nil {
		t.Fatal(err)
	}
	before := get(t, f, "evt:release-42:notify")
	out, err := f.engine.Do(context.Background(), req(t, "evt:release-42:notify", `{"id":"release-42","v":2}`), act.run)
	if !errors.Is(err, idem.ErrKeyReused) || out.Stored {
		t.Fatalf("got %v (stored %v); want KEY_REUSED, not stored", err, out.Stored)
	}
	if act.calls.Load() != 1 {
		t.Errorf("calls %d; want 1", act.calls.Load())
	}
	if diff := cmp.Diff(before, get(t, f, "evt:release-42:notify")); diff != "" {
		t.Errorf("KEY_REUSED changed the record (-before +after):\n%s", diff)
	}
}

func TestSeed4InvalidKey(t *testing.T) {
	for _, key := range []string{"", "short", "evt:has space:notify", "evt:slash/x:notify", strings.Repeat("k", 129), "evt:é:notify"} {
		t.Run(fmt.Sprintf("%.20q", key), func(t *testing.T) {
			f := newFixture(t)
			act := &counter{}
			out, err := f.engine.Do(context.Background(), idem.Request{Key: key, Fingerprint: strings.Repeat("a", 64)}, act.run)
			var e *idem.Error
			if !errors.As(err, &e) || e.Code != idem.CodeInvalidKey || e.Retryable || e.Message == "" {
				t.Fatalf("got %v; want a permanent INVALID_KEY with a message", err)
			}
			if act.calls.Load() != 0 || out.Stored {
				t.Errorf("calls %d stored %v; want nothing run, nothing stored", act.calls.Load(), out.Stored)
			}
			if _, ok, _ := f.store.Get(context.Background(), key, f.clock.Now()); ok {
				t.Errorf("a record was stored for an invalid key")
			}
			if _, err := idem.NewRequest(key, []byte(`{}`)); errCode(err) != idem.CodeInvalidKey {
				t.Errorf("NewRequest = %v; want INVALID_KEY", err)
			}
		})
	}
	if err := idem.ValidateKey(strings.Repeat("k", 128)); err != nil {
		t.Errorf("128-character key rejected: %v", err)
	}
	if err := idem.ValidateKey("evt:A_b-9"); err != nil {
		t.Errorf("valid key rejected: %v", err)
	}
}

func TestSeed5PermanentErrorRunsOnce(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{idem.Permanent(errors.New("card declined"))}}
	key := "evt:charge-7:charge"
	out, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if errCode(err) != idem.CodePermanentFailure || !out.Stored || out.Status != idem.StatusFailed {
		t.Fatalf("got %v stored %v status %s; want stored PERMANENT_FAILURE", err, out.Stored, out.Status)
	}
	if act.calls.Load() != 1 || len(out.Delays) != 0 {
		t.Errorf("calls %d delays %v; want 1 call, no delays", act.calls.Load(), out.Delays)
	}
	// The redelivery replays the stored error: the code and its sentence
	// (the detail went to the failed attempt's log line).
	again, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodePermanentFailure || e.Message != idem.Sentence(idem.CodePermanentFailure) || !again.Replayed {
		t.Fatalf("replay got %v (replayed %v); want PERMANENT_FAILURE with its sentence, replayed", err, again.Replayed)
	}
	if !strings.Contains(f.logs.String(), `detail="card declined"`) {
		t.Errorf("the detail is not in the attempt's log line: %s", f.logs.String())
	}
	if act.calls.Load() != 1 {
		t.Errorf("replay ran the action: calls %d", act.calls.Load())
	}
}

// The seed's scenario 6 needs a per-key cap: with the cap set to 3, three
// transient errors store RETRY_EXHAUSTED. Without a cap (the default), see
// TestTransientAfterInCallAttemptsIsReleasedOnEveryDelivery.
func TestSeed6ThreeTransientErrorsExhaust(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Retry.AttemptsPerKey = 3 })
	act := &counter{script: []error{idem.Transient(errBoom), idem.Transient(errBoom), idem.Transient(errBoom)}}
	key := "evt:release-43:notify"
	out, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if !errors.Is(err, idem.ErrRetryExhausted) || !out.Stored {
		t.Fatalf("got %v stored %v; want stored RETRY_EXHAUSTED", err, out.Stored)
	}
	if act.calls.Load() != 3 {
		t.Errorf("calls %d; want 3", act.calls.Load())
	}
	if diff := cmp.Diff([]time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, out.Delays); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	rec := get(t, f, key)
	if rec.Status != idem.StatusFailed || rec.Retryable || rec.ErrorCode != idem.CodeRetryExhausted || rec.Attempts != 3 {
		t.Errorf("record %s retryable %v code %s attempts %d; want permanent FAILED RETRY_EXHAUSTED 3", rec.Status, rec.Retryable, rec.ErrorCode, rec.Attempts)
	}
	// Permanent: the next delivery replays it.
	if _, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run); !errors.Is(err, idem.ErrRetryExhausted) || act.calls.Load() != 3 {
		t.Errorf("redelivery: %v, calls %d; want replayed RETRY_EXHAUSTED, 3 calls", err, act.calls.Load())
	}
}

func TestSeed7ConcurrentCallsOneExecution(t *testing.T) {
	f := newFixture(t)
	var calls atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context) ([]byte, error) {
		calls.Add(1)
		close(started)
		<-release
		return []byte(`"done"`), nil
	}
	r := req(t, "evt:release-44:notify", `{}`)
	done := make(chan error)
	go func() { _, err := f.engine.Do(context.Background(), r, slow); done <- err }()
	<-started
	out, err := f.engine.Do(context.Background(), r, slow)
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeInProgress || !e.Retryable || e.RetryAfter <= 0 || out.Stored {
		t.Fatalf("concurrent Do = %v (stored %v); want retryable IN_PROGRESS with RetryAfter", err, out.Stored)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first Do: %v", err)
	}
	if calls.Load() != 1 {
		t.Errorf("executions %d; want 1", calls.Load())
	}
}

func TestSeed8DifferentEventsSamePayloadBothRun(t *testing.T) {
	f := newFixture(t)
	act := &counter{}
	for _, key := range []string{"evt:release-45:notify", "evt:release-46:notify"} {
		if out, err := f.engine.Do(context.Background(), req(t, key, `{"same":true}`), act.run); err != nil || out.Replayed {
			t.Fatalf("Do(%s) = %+v, %v", key, out, err)
		}
	}
	if act.calls.Load() != 2 {
		t.Errorf("executions %d; want 2", act.calls.Load())
	}
}

// --- Leases, fencing, retention ---

func TestLeaseExpiryAllowsTakeOverAndCountsAttempts(t *testing.T) {
	f := newFixture(t)
	key := "evt:crash-1:notify"
	r := req(t, key, `{}`)
	// A worker reserves and "crashes": its action never returns in time.
	crashed := make(chan struct{})
	go func() {
		_, _ = f.engine.Do(context.Background(), r, func(ctx context.Context) ([]byte, error) {
			close(crashed)
			<-dead(t) // never returns while the test runs: the process died
			return nil, errBoom
		})
	}()
	<-crashed
	act := &counter{}
	if _, err := f.engine.Do(context.Background(), r, act.run); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("before the lease ends: %v; want IN_PROGRESS", err)
	}
	f.clock.Advance(time.Minute) // exactly at the lease's end: it has ended
	out, err := f.engine.Do(context.Background(), r, act.run)
	if err != nil || out.Replayed || act.calls.Load() != 1 {
		t.Fatalf("after the lease: %+v %v calls %d; want a take-over that runs once", out, err, act.calls.Load())
	}
	if rec := get(t, f, key); rec.Attempts != 2 || rec.Status != idem.StatusSucceeded {
		t.Errorf("record attempts %d status %s; want 2 SUCCEEDED", rec.Attempts, rec.Status)
	}
}

func TestFencedCompletionAfterTakeOverGetsLeaseLost(t *testing.T) {
	f := newFixture(t)
	key := "evt:slow-1:notify"
	r := req(t, key, `{}`)
	inAction, finish := make(chan struct{}), make(chan struct{})
	slowDone := make(chan idem.Outcome)
	go func() {
		out, _ := f.engine.Do(context.Background(), r, func(ctx context.Context) ([]byte, error) {
			close(inAction)
			<-finish
			return []byte(`"late"`), nil
		})
		slowDone <- out
	}()
	<-inAction
	f.clock.Advance(2 * time.Minute)
	newOwner, err := f.engine.Do(context.Background(), r, func(context.Context) ([]byte, error) { return []byte(`"new"`), nil })
	if err != nil || newOwner.Replayed {
		t.Fatalf("take-over: %+v %v", newOwner, err)
	}
	close(finish)
	late := <-slowDone
	if late.Err == nil || late.Err.Code != idem.CodeLeaseLost || late.Stored || late.Result != nil {
		t.Fatalf("late worker: %+v; want LEASE_LOST, nothing stored, result discarded", late)
	}
	if rec := get(t, f, key); string(rec.Result) != `"new"` {
		t.Errorf("record result %s; want the new owner's \"new\"", rec.Result)
	}
	if late.Label() != idem.LabelLeaseLost || !strings.Contains(f.logs.String(), "lease lost") {
		t.Errorf("label %s, logs %q; want lease_lost (its count) and logged", late.Label(), f.logs.String())
	}
}

func TestRetentionExpiryCountsAsAbsent(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Retention = time.Hour })
	key := "evt:old-1:notify"
	act := &counter{}
	if _, err := f.engine.Do(context.Background(), req(t, key, `{"v":1}`), act.run); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(59 * time.Minute)
	if out, _ := f.engine.Do(context.Background(), req(t, key, `{"v":1}`), act.run); !out.Replayed {
		t.Fatalf("inside retention: %+v; want replayed", out)
	}
	f.clock.Advance(time.Minute) // the store still holds it: TTL deletion lags
	out, err := f.engine.Do(context.Background(), req(t, key, `{"v":2}`), act.run)
	if err != nil || out.Replayed || act.calls.Load() != 2 || out.Attempts != 1 {
		t.Fatalf("after retention: %+v %v calls %d; want a fresh run with attempts 1", out, err, act.calls.Load())
	}
}

func TestFalsyResultsReplayWithoutRerunning(t *testing.T) {
	for name, result := range storetest.ResultShapes() {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			f := newFixture(t)
			act := &counter{result: result}
			key := "evt:falsy-1:notify"
			if _, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run); err != nil {
				t.Fatal(err)
			}
			out, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
			if err != nil || !out.Replayed || string(out.Result) != string(result) || out.Result == nil {
				t.Fatalf("replay: %+v %v; want replayed %q", out, err, result)
			}
			if act.calls.Load() != 1 {
				t.Errorf("calls %d; want 1", act.calls.Load())
			}
		})
	}
}

func TestDeadlineCutsBackoffShort(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) {
		o.Lease = 0 // up to the ctx deadline
		o.Retry = idem.RetryPolicy{AttemptsPerDelivery: 10, Base: 10 * time.Minute, Max: time.Hour}
		o.Budget = idem.Budget{StoreReserve: 30 * time.Second, RespondReserve: 30 * time.Second}
	})
	start := f.clock.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(25*time.Minute))
	defer cancel()
	act := &counter{script: []error{idem.Transient(errBoom), idem.Transient(errBoom)}}
	key := "evt:deadline-1:notify"
	out, err := f.engine.Do(ctx, req(t, key, `{}`), act.run)
	// Work must end by 25min-1min: sleeping 10min (to t=10m) fits; the next
	// 20min (to t=30m) does not, so the key is released.
	var e *idem.Error
	if !errors.As(err, &e) || e.Code != idem.CodeTransientFailure || !e.Retryable || out.Stored {
		t.Fatalf("got %v stored %v; want a released TRANSIENT_FAILURE", err, out.Stored)
	}
	if diff := cmp.Diff([]time.Duration{10 * time.Minute}, out.Delays); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	rec := get(t, f, key)
	if rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != 2 {
		t.Errorf("record %s retryable %v attempts %d; want released (FAILED, retryable), 2 attempts", rec.Status, rec.Retryable, rec.Attempts)
	}
	if !rec.LeaseUntil.Equal(start.Add(25 * time.Minute)) {
		t.Errorf("lease until %v; want the ctx deadline", rec.LeaseUntil)
	}
	// The redelivery takes the released key over and succeeds; attempts go on counting.
	out, err = f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
	if err != nil || out.Attempts != 3 {
		t.Fatalf("redelivery: %+v %v; want success at attempt 3", out, err)
	}
}

func TestNoReservationWithoutTimeLeft(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Lease = 0 })
	reserve := idem.DefaultStoreReserve + idem.DefaultRespondReserve
	for _, left := range []time.Duration{0, time.Millisecond, reserve, reserve + idem.DefaultMinWork - time.Millisecond} {
		ctx, cancel := context.WithDeadline(context.Background(), f.clock.Now().Add(left))
		act := &counter{}
		_, err := f.engine.Do(ctx, req(t, "evt:late-1:notify", `{}`), act.run)
		cancel()
		if errCode(err) != idem.CodeDeadline || act.calls.Load() != 0 {
			t.Errorf("%v left: %v, calls %d; want DEADLINE and nothing run", left, err, act.calls.Load())
		}
	}
	if _, ok, _ := f.store.Get(context.Background(), "evt:late-1:notify", f.clock.Now()); ok {
		t.Errorf("a record was reserved with no time left")
	}
}

func TestLeaseIsMinOfConfiguredAndDeadline(t *testing.T) {
	tests := []struct {
		name     string
		lease    time.Duration
		deadline time.Duration // 0: no deadline
		want     time.Duration
	}{
		{"configured shorter", time.Minute, time.Hour, time.Minute},
		{"deadline shorter", time.Hour, 30 * time.Second, 30 * time.Second},
		{"up to deadline", 0, 40 * time.Second, 40 * time.Second},
		{"no deadline no lease", 0, 0, idem.DefaultLease},
		{"no deadline", 2 * time.Minute, 0, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(o *idem.Options) { o.Lease = tt.lease })
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, f.clock.Now().Add(tt.deadline))
				defer cancel()
			}
			start := f.clock.Now()
			var lease time.Time
			_, err := f.engine.Do(ctx, req(t, "evt:lease-1:notify", `{}`), func(context.Context) ([]byte, error) {
				rec := get(t, f, "evt:lease-1:notify")
				lease = rec.LeaseUntil
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := lease.Sub(start); got != tt.want {
				t.Errorf("lease %v; want %v", got, tt.want)
			}
		})
	}
}

func TestRetryAfterHonouredAndCapped(t *testing.T) {
	t.Run("within cap is slept", func(t *testing.T) {
		f := newFixture(t)
		act := &counter{script: []error{idem.TransientAfter(errBoom, 700*time.Millisecond)}}
		out, err := f.engine.Do(context.Background(), req(t, "evt:ra-1:notify", `{}`), act.run)
		if err != nil || !cmp.Equal(out.Delays, []time.Duration{700 * time.Millisecond}) {
			t.Fatalf("got %v delays %v; want success after sleeping 700ms", err, out.Delays)
		}
	})
	t.Run("beyond cap releases for redelivery", func(t *testing.T) {
		f := newFixture(t)
		act := &counter{script: []error{idem.TransientAfter(errBoom, 30*time.Second)}}
		out, err := f.engine.Do(context.Background(), req(t, "evt:ra-2:notify", `{}`), act.run)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeTransientFailure || e.RetryAfter != 30*time.Second || len(out.Delays) != 0 {
			t.Fatalf("got %v delays %v; want TRANSIENT_FAILURE with RetryAfter 30s, no sleep", err, out.Delays)
		}
		if act.calls.Load() != 1 {
			t.Errorf("calls %d; want 1", act.calls.Load())
		}
	})
}

func TestPanicBecomesPermanentFailure(t *testing.T) {
	f := newFixture(t)
	out, err := f.engine.Do(context.Background(), req(t, "evt:panic-1:notify", `{}`), func(context.Context) ([]byte, error) {
		panic("index out of range in the action")
	})
	if errCode(err) != idem.CodePanic || !out.Stored || out.Err.Retryable {
		t.Fatalf("got %v stored %v; want stored permanent PANIC", err, out.Stored)
	}
	if !strings.Contains(f.logs.String(), "goroutine") {
		t.Errorf("panic stack not logged: %q", f.logs.String())
	}
}

// An action that ends its goroutine with runtime.Goexit (t.FailNow inside
// it, or a library that calls Goexit) neither returned nor panicked: it is
// a PANIC, never a stored success with no result.
func TestGoexitIsNotASuccess(t *testing.T) {
	f := newFixture(t)
	out, err := f.engine.Do(context.Background(), req(t, "evt:goexit-1:notify", `{}`), func(context.Context) ([]byte, error) {
		runtime.Goexit()
		return []byte(`"unreachable"`), nil
	})
	if errCode(err) != idem.CodePanic || out.Status == idem.StatusSucceeded {
		t.Fatalf("got %v status %s; want PANIC, not SUCCEEDED", err, out.Status)
	}
}

func TestUnknownErrorIsPermanentAndLogged(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{errors.New("mystery")}}
	out, err := f.engine.Do(context.Background(), req(t, "evt:unknown-1:notify", `{}`), act.run)
	if errCode(err) != idem.CodePermanentFailure || !out.Stored || act.calls.Load() != 1 {
		t.Fatalf("got %v stored %v calls %d; want stored PERMANENT_FAILURE after 1 call", err, out.Stored, act.calls.Load())
	}
	if !strings.Contains(f.logs.String(), "mystery") || !strings.Contains(f.logs.String(), "unclassified") {
		t.Errorf("unknown error not logged with details: %q", f.logs.String())
	}
}

func TestCustomPermanentCodeStoredAndReplayed(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{idem.PermanentCode("HTTP_404", errors.New("downstream said 404"))}}
	key := "evt:code-1:notify"
	if _, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run); errCode(err) != "HTTP_404" {
		t.Fatalf("got %v; want HTTP_404", err)
	}
	if _, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run); errCode(err) != "HTTP_404" || act.calls.Load() != 1 {
		t.Fatalf("replay got %v calls %d; want HTTP_404 replayed", err, act.calls.Load())
	}
}

func TestCrashedLastAttemptIsExhaustedWithoutRunning(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Retry.AttemptsPerKey = 1 })
	key := "evt:crash-2:notify"
	r := req(t, key, `{}`)
	crashed := make(chan struct{})
	go func() {
		_, _ = f.engine.Do(context.Background(), r, func(ctx context.Context) ([]byte, error) { close(crashed); <-dead(t); return nil, nil })
	}()
	<-crashed
	f.clock.Advance(time.Hour / 2)
	act := &counter{}
	out, err := f.engine.Do(context.Background(), r, act.run)
	if !errors.Is(err, idem.ErrRetryExhausted) || act.calls.Load() != 0 || !out.Stored || out.Attempts != 1 {
		t.Fatalf("got %v calls %d stored %v attempts %d; want stored RETRY_EXHAUSTED, nothing run, 1 attempt", err, act.calls.Load(), out.Stored, out.Attempts)
	}
}

// --- Two budgets: attempts per delivery, and an optional cap per key ---

// With no per-key cap (the default), a transient failure after the in-call
// attempts always releases the key, on every delivery: the queue decides
// when to give up. Once the downstream heals, the next delivery runs once.
func TestTransientAfterInCallAttemptsIsReleasedOnEveryDelivery(t *testing.T) {
	f := newFixture(t)
	key := "evt:outage-1:notify"
	failing := &counter{script: slices.Repeat([]error{idem.Transient(errBoom)}, 150)}
	for delivery := 1; delivery <= 50; delivery++ {
		out, err := f.engine.Do(context.Background(), req(t, key, `{}`), failing.run)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeTransientFailure || !e.Retryable || out.Stored || out.Label() != idem.LabelTransient {
			t.Fatalf("delivery %d: %v stored %v label %s; want a released TRANSIENT_FAILURE, not stored", delivery, err, out.Stored, out.Label())
		}
		if e.RetryAfter != 0 {
			t.Errorf("delivery %d: RetryAfter %v; want 0 (no pause was asked for: the caller backs off)", delivery, e.RetryAfter)
		}
		if delivery == 6 || delivery == 10 || delivery == 50 {
			rec := get(t, f, key)
			if rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != 3*delivery || rec.ErrorCode != idem.CodeTransientFailure {
				t.Errorf("after delivery %d: %s retryable %v attempts %d code %s; want FAILED, retryable, %d attempts, TRANSIENT_FAILURE",
					delivery, rec.Status, rec.Retryable, rec.Attempts, rec.ErrorCode, 3*delivery)
			}
		}
	}
	if n := failing.calls.Load(); n != 150 {
		t.Errorf("executions %d; want 150 (3 per delivery)", n)
	}
	healed := &counter{}
	out, err := f.engine.Do(context.Background(), req(t, key, `{}`), healed.run)
	if err != nil || !out.Stored || healed.calls.Load() != 1 || out.Attempts != 151 {
		t.Fatalf("after healing: %+v %v calls %d; want one stored execution at attempt 151", out, err, healed.calls.Load())
	}
	if again, err := f.engine.Do(context.Background(), req(t, key, `{}`), healed.run); err != nil || !again.Replayed || healed.calls.Load() != 1 {
		t.Errorf("next delivery: %+v %v; want a replay", again, err)
	}
}

func TestPerKeyCapCountsAcrossDeliveries(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Retry.AttemptsPerDelivery, o.Retry.AttemptsPerKey = 2, 5 })
	key := "evt:capped-1:notify"
	act := &counter{script: slices.Repeat([]error{idem.Transient(errBoom)}, 10)}
	for delivery, want := range []idem.Code{idem.CodeTransientFailure, idem.CodeTransientFailure, idem.CodeRetryExhausted} {
		out, err := f.engine.Do(context.Background(), req(t, key, `{}`), act.run)
		if errCode(err) != want {
			t.Fatalf("delivery %d: %v; want %s", delivery+1, err, want)
		}
		if want == idem.CodeRetryExhausted && (!out.Stored || out.Label() != idem.LabelRetryExhausted) {
			t.Errorf("exhausted outcome stored %v label %s; want stored, retry_exhausted", out.Stored, out.Label())
		}
	}
	if n := act.calls.Load(); n != 5 {
		t.Errorf("executions %d; want 5 (2, 2, then the fifth exhausts the cap)", n)
	}
}

// A Retry-After the engine does not sleep in-call is handed to the caller
// (SQS: the message's visibility; API: the Retry-After header).
func TestLongRetryAfterIsHandedToTheCaller(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{idem.TransientAfter(errBoom, 120*time.Second)}}
	out, err := f.engine.Do(context.Background(), req(t, "evt:ra-3:notify", `{}`), act.run)
	var e *idem.Error
	if !errors.As(err, &e) || e.RetryAfter != 120*time.Second || out.Stored || len(out.Delays) != 0 {
		t.Fatalf("got %v delays %v; want a released failure carrying RetryAfter 120s, nothing slept", err, out.Delays)
	}
	// On the delivery's last attempt too.
	g := newFixture(t, func(o *idem.Options) { o.Retry.AttemptsPerDelivery = 2 })
	act = &counter{script: []error{idem.Transient(errBoom), idem.TransientAfter(errBoom, 90*time.Second)}}
	if _, err := g.engine.Do(context.Background(), req(t, "evt:ra-4:notify", `{}`), act.run); !errors.As(err, &e) || e.RetryAfter != 90*time.Second {
		t.Errorf("last attempt: %v; want RetryAfter 90s handed over", err)
	}
}

// Every store call, and the action, run within the invocation's budget:
// store calls (with the SDK's retries) end by the deadline minus the
// respond reserve, the action by the store deadline minus the store reserve.
func TestStoreCallsAndActionEndWithinTheBudget(t *testing.T) {
	rs := &recordingStore{Store: memstore.New()}
	budget := idem.Budget{StoreReserve: 400 * time.Millisecond, RespondReserve: 300 * time.Millisecond}
	f := newFixture(t, func(o *idem.Options) { o.Store, o.Lease, o.Budget = rs, 0, budget })
	deadline := f.clock.Now().Add(3 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var actionDeadline time.Time
	act := func(ctx context.Context) ([]byte, error) {
		actionDeadline, _ = ctx.Deadline()
		return []byte(`1`), nil
	}
	if _, err := f.engine.Do(ctx, req(t, "evt:budget-2:notify", `{}`), act); err != nil {
		t.Fatal(err)
	}
	wantStore := deadline.Add(-300 * time.Millisecond)
	if got := rs.deadlines(); len(got) != 2 || !got[0].Equal(wantStore) || !got[1].Equal(wantStore) {
		t.Errorf("store call deadlines %v; want 2 calls, each by %v", got, wantStore)
	}
	if want := wantStore.Add(-400 * time.Millisecond); !actionDeadline.Equal(want) {
		t.Errorf("action deadline %v; want %v", actionDeadline, want)
	}
}

// A record starts whenever a useful attempt fits, however long the
// action's own timeout would be.
func TestRecordStartsWhenAUsefulAttemptFits(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Lease = 0 })
	ctx, cancel := context.WithDeadline(context.Background(), f.clock.Now().Add(idem.Budget{}.Reserve()+idem.DefaultMinWork))
	defer cancel()
	act := &counter{}
	if _, err := f.engine.Do(ctx, req(t, "evt:fits-1:notify", `{}`), act.run); err != nil || act.calls.Load() != 1 {
		t.Fatalf("got %v calls %d; want the record run", err, act.calls.Load())
	}
}

type recordingStore struct {
	idem.Store
	mu  sync.Mutex
	got []time.Time
}

func (s *recordingStore) note(ctx context.Context) {
	d, _ := ctx.Deadline()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, d)
}

func (s *recordingStore) deadlines() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *recordingStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	s.note(ctx)
	return s.Store.Reserve(ctx, r)
}

func (s *recordingStore) Complete(ctx context.Context, f idem.Finish) error {
	s.note(ctx)
	return s.Store.Complete(ctx, f)
}

func (s *recordingStore) Fail(ctx context.Context, f idem.Finish) error {
	s.note(ctx)
	return s.Store.Fail(ctx, f)
}

func get(t *testing.T, f *fixture, key string) idem.Record {
	t.Helper()
	rec, ok, err := f.store.Get(context.Background(), key, f.clock.Now())
	if err != nil || !ok {
		t.Fatalf("Get(%s): found %v err %v", key, ok, err)
	}
	return rec
}

// dead returns a channel closed when the test ends: an action blocked on it
// stands for a worker that crashed mid-action.
func dead(t *testing.T) <-chan struct{} {
	ch := make(chan struct{})
	t.Cleanup(func() { close(ch) })
	return ch
}

// slowStore's Reserve takes the clock forward, as a slow store call (or the
// SDK's retries) would.
type slowStore struct {
	idem.Store
	clock *fakeClock
	took  time.Duration
}

func (s slowStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	s.clock.Advance(s.took)
	return s.Store.Reserve(ctx, r)
}

// A reservation that used up the time the attempt needed does not run the
// action (its context would already have ended) and counts no attempt.
func TestReservationThatTookTheTimeReleasesWithoutCounting(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Lease = 0 })
	f.engine, _ = idem.New(idem.Options{Store: slowStore{Store: f.store, clock: f.clock, took: 1500 * time.Millisecond},
		Now: f.clock.Now, Sleep: f.clock.Sleep, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithDeadline(context.Background(), f.clock.Now().Add(2*time.Second))
	defer cancel()
	act := &counter{}
	out, err := f.engine.Do(ctx, req(t, "evt:slow-1:notify", `{}`), act.run)
	if errCode(err) != idem.CodeDeadline || out.Stored || act.calls.Load() != 0 {
		t.Fatalf("got %+v %v, %d calls; want DEADLINE, nothing run", out, err, act.calls.Load())
	}
	rec := get(t, f, "evt:slow-1:notify")
	if rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != 0 {
		t.Errorf("record %s retryable %v attempts %d; want released with no attempt counted", rec.Status, rec.Retryable, rec.Attempts)
	}
}

// An attempt whose request may have reached the receiver (Sent) ends the
// delivery's attempts: the key is released at once, with no backoff slept
// and no second execution, however many attempts the policy allows; the
// next delivery takes it over and runs it again. An unmarked transient
// error is still retried within the delivery.
func TestSentTransientEndsTheDeliverysAttempts(t *testing.T) {
	f := newFixture(t)
	key := "evt:slow-1:notify"
	sent := &counter{script: []error{idem.TransientSent(errBoom), idem.TransientSent(errBoom)}}
	for delivery := 1; delivery <= 2; delivery++ {
		out, err := f.engine.Do(context.Background(), req(t, key, `{}`), sent.run)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeTransientFailure || !e.Retryable || out.Stored || e.RetryAfter != 0 {
			t.Fatalf("delivery %d: %v stored %v; want a released TRANSIENT_FAILURE, no Retry-After (the caller's backoff applies)", delivery, err, out.Stored)
		}
		if out.Calls != 1 || len(out.Delays) != 0 || int(sent.calls.Load()) != delivery {
			t.Errorf("delivery %d: calls %d, delays %v, executions so far %d; want one execution per delivery, nothing slept", delivery, out.Calls, out.Delays, sent.calls.Load())
		}
		if rec := get(t, f, key); rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != delivery {
			t.Errorf("after delivery %d: %s retryable %v attempts %d; want FAILED, retryable, %d attempts", delivery, rec.Status, rec.Retryable, rec.Attempts, delivery)
		}
	}
	if out, err := f.engine.Do(context.Background(), req(t, key, `{}`), sent.run); err != nil || !out.Stored || out.Attempts != 3 {
		t.Fatalf("third delivery: %+v %v; want the stored success at attempt 3", out, err)
	}
	// Wrapped (even in another transient mark), and after an unmarked
	// transient error that was retried.
	mixed := &counter{script: []error{idem.Transient(errBoom), idem.Transient(fmt.Errorf("notify: %w", idem.TransientSent(errBoom)))}}
	out, _ := f.engine.Do(context.Background(), req(t, "evt:slow-2:notify", `{}`), mixed.run)
	if out.Calls != 2 || mixed.calls.Load() != 2 || errCode(out.Err) != idem.CodeTransientFailure {
		t.Errorf("calls %d (executions %d) %v; want 2: the unmarked failure retried, the sent one ending the delivery", out.Calls, mixed.calls.Load(), out.Err)
	}
}

// A transient error marked NextDelivery (a complete answer the same
// request would get again, like a refused signature no read could judge)
// ends the delivery after its one attempt: the key is released at once,
// nothing slept, and the next delivery runs it again. It is not Sent, so
// an API caller gets no pause for it (IsSent stays false).
func TestNextDeliveryTransientEndsTheDeliveryWithoutAPause(t *testing.T) {
	f := newFixture(t)
	key := "evt:refused-1:notify"
	refused := &counter{script: []error{idem.TransientNextDelivery(errBoom), fmt.Errorf("notify: %w", idem.TransientNextDelivery(errBoom))}}
	for delivery := 1; delivery <= 2; delivery++ {
		out, err := f.engine.Do(context.Background(), req(t, key, `{}`), refused.run)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != idem.CodeTransientFailure || !e.Retryable || out.Stored || e.RetryAfter != 0 {
			t.Fatalf("delivery %d: %v stored %v; want a released TRANSIENT_FAILURE, no Retry-After", delivery, err, out.Stored)
		}
		if out.Calls != 1 || len(out.Delays) != 0 || int(refused.calls.Load()) != delivery {
			t.Errorf("delivery %d: calls %d, delays %v, executions so far %d; want one execution per delivery, nothing slept", delivery, out.Calls, out.Delays, refused.calls.Load())
		}
		if idem.IsSent(e.Err) {
			t.Errorf("delivery %d: %v is Sent; want no pause asked", delivery, err)
		}
		if rec := get(t, f, key); rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != delivery {
			t.Errorf("after delivery %d: %s retryable %v attempts %d; want FAILED, retryable, %d attempts", delivery, rec.Status, rec.Retryable, rec.Attempts, delivery)
		}
	}
	if out, err := f.engine.Do(context.Background(), req(t, key, `{}`), refused.run); err != nil || !out.Stored || out.Attempts != 3 {
		t.Fatalf("third delivery: %+v %v; want the stored success at attempt 3", out, err)
	}
}

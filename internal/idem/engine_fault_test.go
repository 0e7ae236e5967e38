package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// faultStore wraps the real in-memory store and lets a test make one of its
// operations fail, the way a driver reports a classified failure.
type faultStore struct {
	idem.Store
	reserve  func(idem.Reservation) error
	takeOver func(prev idem.Record, r idem.Reservation) (idem.Record, bool, bool) // result, acquired, override
	complete func(n int64) error
	fail     func(n int64) error
	nComp    atomic.Int64
	nFail    atomic.Int64
}

func (s *faultStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if s.reserve != nil {
		if err := s.reserve(r); err != nil {
			return idem.Record{}, false, err
		}
	}
	return s.Store.Reserve(ctx, r)
}

func (s *faultStore) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	if s.takeOver != nil {
		if rec, ok, override := s.takeOver(prev, r); override {
			return rec, ok, nil
		}
	}
	return s.Store.TakeOver(ctx, prev, r)
}

func (s *faultStore) Complete(ctx context.Context, f idem.Finish) error {
	n := s.nComp.Add(1)
	if s.complete != nil {
		if err := s.complete(n); err != nil {
			return err
		}
	}
	return s.Store.Complete(ctx, f)
}

func (s *faultStore) Fail(ctx context.Context, f idem.Finish) error {
	n := s.nFail.Add(1)
	if s.fail != nil {
		if err := s.fail(n); err != nil {
			return err
		}
	}
	return s.Store.Fail(ctx, f)
}

func withStore(fs *faultStore) func(*idem.Options) {
	return func(o *idem.Options) { fs.Store = o.Store; o.Store = fs }
}

var errWire = errors.New("connection dropped")

func TestStoreOutageOnReserveRunsNothing(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		code      idem.Code
		retryable bool
	}{
		{"transient", idem.Transient(errWire), idem.CodeStoreUnavailable, true},
		{"outcome unknown", idem.OutcomeUnknown(errWire), idem.CodeStoreUnavailable, true},
		{"unclassified", errWire, idem.CodeStoreUnavailable, true},
		{"misconfigured", idem.Permanent(errors.New("table idem missing")), idem.CodeStoreMisconfigured, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &faultStore{reserve: func(idem.Reservation) error { return tt.err }}
			f := newFixture(t, withStore(fs))
			act := &counter{}
			out, err := f.engine.Do(context.Background(), req(t, "evt:outage-1:notify", `{}`), act.run)
			var e *idem.Error
			if !errors.As(err, &e) || e.Code != tt.code || e.Retryable != tt.retryable || out.Stored {
				t.Fatalf("got %v (retryable %v, stored %v); want %s retryable=%v, not stored", err, e != nil && e.Retryable, out.Stored, tt.code, tt.retryable)
			}
			if act.calls.Load() != 0 {
				t.Errorf("the action ran without a reservation")
			}
		})
	}
}

func TestCompletionWriteRetriedThenSucceeds(t *testing.T) {
	fs := &faultStore{complete: func(n int64) error {
		if n == 1 {
			return idem.OutcomeUnknown(errWire)
		}
		return nil
	}}
	f := newFixture(t, withStore(fs))
	act := &counter{}
	out, err := f.engine.Do(context.Background(), req(t, "evt:complete-1:notify", `{}`), act.run)
	if err != nil || !out.Stored || act.calls.Load() != 1 || fs.nComp.Load() != 2 {
		t.Fatalf("got %+v %v, calls %d, completes %d; want stored success, 1 call, 2 completion writes", out, err, act.calls.Load(), fs.nComp.Load())
	}
}

func TestCompletionWriteFailingIsNeverAcknowledged(t *testing.T) {
	fs := &faultStore{complete: func(int64) error { return idem.Transient(errWire) }}
	f := newFixture(t, withStore(fs))
	act := &counter{}
	out, err := f.engine.Do(context.Background(), req(t, "evt:complete-2:notify", `{}`), act.run)
	if errCode(err) != idem.CodeStoreUnavailable || out.Stored || act.calls.Load() != 1 {
		t.Fatalf("got %v stored %v calls %d; want STORE_UNAVAILABLE, not stored, action not re-run", err, out.Stored, act.calls.Load())
	}
	if fs.nComp.Load() != 3 {
		t.Errorf("completion writes %d; want 3 (the write's own attempts)", fs.nComp.Load())
	}
	if !strings.Contains(f.logs.String(), "completion write failed") {
		t.Errorf("failed completion not logged: %q", f.logs.String())
	}
	// The record still says IN_PROGRESS with the lease: a duplicate waits.
	if _, err := f.engine.Do(context.Background(), req(t, "evt:complete-2:notify", `{}`), act.run); !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("duplicate after failed completion: %v; want IN_PROGRESS", err)
	}
}

func TestResultTooLargeIsRecordedAsFailure(t *testing.T) {
	fs := &faultStore{complete: func(int64) error {
		return idem.PermanentCode(idem.CodeResultTooLarge, errors.New("result is 500000 bytes; the limit is 399000"))
	}}
	f := newFixture(t, withStore(fs))
	out, err := f.engine.Do(context.Background(), req(t, "evt:big-1:notify", `{}`), (&counter{}).run)
	if errCode(err) != idem.CodeResultTooLarge || !out.Stored {
		t.Fatalf("got %v stored %v; want stored RESULT_TOO_LARGE", err, out.Stored)
	}
	if rec := get(t, f, "evt:big-1:notify"); rec.ErrorCode != idem.CodeResultTooLarge || rec.ErrorMessage != idem.Sentence(idem.CodeResultTooLarge) {
		t.Errorf("record %s %q; want RESULT_TOO_LARGE with its sentence", rec.ErrorCode, rec.ErrorMessage)
	}
	if !strings.Contains(f.logs.String(), "500000") {
		t.Errorf("the size is not in the attempt's log line: %s", f.logs.String())
	}
}

func TestFailWriteLeaseLost(t *testing.T) {
	fs := &faultStore{fail: func(int64) error { return idem.ErrLeaseLost }}
	f := newFixture(t, withStore(fs))
	act := &counter{script: []error{idem.Permanent(errBoom)}}
	out, err := f.engine.Do(context.Background(), req(t, "evt:faillost-1:notify", `{}`), act.run)
	if !errors.Is(err, idem.ErrLeaseLost) || out.Stored || out.Label() != idem.LabelLeaseLost {
		t.Fatalf("got %v stored %v label %s; want LEASE_LOST counted by its label, not stored", err, out.Stored, out.Label())
	}
}

func TestRecordVanishingBetweenCallsIsReservedAfresh(t *testing.T) {
	var vanished atomic.Bool
	fs := &faultStore{takeOver: func(idem.Record, idem.Reservation) (idem.Record, bool, bool) {
		if vanished.CompareAndSwap(false, true) {
			return idem.Record{}, false, true // retention ended between the two calls
		}
		return idem.Record{}, false, false
	}}
	f := newFixture(t, withStore(fs))
	r := req(t, "evt:vanish-1:notify", `{}`)
	act := &counter{script: []error{idem.TransientAfter(errBoom, time.Hour)}}
	if _, err := f.engine.Do(context.Background(), r, act.run); errCode(err) != idem.CodeTransientFailure {
		t.Fatalf("setup: %v", err)
	}
	// The released record is claimable; the fault store reports it gone, so the
	// engine reserves again (the memstore still has it, so that Reserve finds
	// the claimable record and the second take-over goes through).
	out, err := f.engine.Do(context.Background(), r, act.run)
	if err != nil || out.Attempts != 2 || !vanished.Load() {
		t.Fatalf("got %+v %v; want success at attempt 2 after re-reserving", out, err)
	}
}

func TestEndlessContentionGivesInProgress(t *testing.T) {
	fs := &faultStore{}
	fs.takeOver = func(prev idem.Record, r idem.Reservation) (idem.Record, bool, bool) {
		return prev, false, true // always lose the race, to a record still claimable
	}
	f := newFixture(t, withStore(fs))
	r := req(t, "evt:contend-1:notify", `{}`)
	act := &counter{script: []error{idem.TransientAfter(errBoom, time.Hour)}}
	_, _ = f.engine.Do(context.Background(), r, act.run)
	out, err := f.engine.Do(context.Background(), r, act.run)
	if !errors.Is(err, idem.ErrInProgress) || act.calls.Load() != 1 {
		t.Fatalf("got %v calls %d; want IN_PROGRESS without running", err, act.calls.Load())
	}
	if out.Attempts != 1 {
		t.Errorf("got attempts %d; want 1, the count of the record contended for", out.Attempts)
	}
}

func TestActionOutcomeUnknownIsNotRerun(t *testing.T) {
	f := newFixture(t)
	act := &counter{script: []error{idem.OutcomeUnknown(errWire)}}
	out, err := f.engine.Do(context.Background(), req(t, "evt:unknown-3:notify", `{}`), act.run)
	if errCode(err) != "OUTCOME_UNKNOWN" || !out.Stored || act.calls.Load() != 1 {
		t.Fatalf("got %v stored %v calls %d; want stored OUTCOME_UNKNOWN after 1 call", err, out.Stored, act.calls.Load())
	}
}

func TestCancelledSleepReleasesKey(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Sleep = nil }) // the real timer
	ctx, cancel := context.WithCancel(context.Background())
	act := &counter{}
	act.script = []error{idem.Transient(errBoom)}
	f2 := func(c context.Context) ([]byte, error) { cancel(); return act.run(c) }
	out, err := f.engine.Do(ctx, req(t, "evt:cancel-1:notify", `{}`), f2)
	if errCode(err) != idem.CodeTransientFailure || out.Stored || act.calls.Load() != 1 {
		t.Fatalf("got %v stored %v calls %d; want released TRANSIENT_FAILURE", err, out.Stored, act.calls.Load())
	}
}

func TestRealSleepWaits(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Sleep = nil; o.Now = nil })
	act := &counter{script: []error{idem.Transient(errBoom)}}
	start := time.Now()
	out, err := f.engine.Do(context.Background(), req(t, "evt:sleep-1:notify", `{}`), act.run)
	elapsed := time.Since(start)
	if err != nil || len(out.Delays) != 1 {
		t.Fatalf("got %+v %v; want success after one real delay", out, err)
	}
	// A lower bound only: the real timer waited at least the delay.
	if elapsed < out.Delays[0] {
		t.Errorf("Do took %v; want at least the %v it slept", elapsed, out.Delays[0])
	}
}

func TestNewRequiresStore(t *testing.T) {
	if _, err := idem.New(idem.Options{}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Errorf("New without a store = %v; want an error naming Store", err)
	}
	e, err := idem.New(idem.Options{Store: memstore.New()})
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	r, _ := idem.NewRequest("evt:defaults-1:notify", []byte(`{}`))
	if out, err := e.Do(context.Background(), r, func(context.Context) ([]byte, error) { return []byte(`1`), nil }); err != nil || !out.Stored {
		t.Errorf("Do with defaults: %+v %v; want a stored success", out, err)
	}
}

func TestBadFingerprintRejected(t *testing.T) {
	f := newFixture(t)
	_, err := f.engine.Do(context.Background(), idem.Request{Key: "evt:fp-1:notify", Fingerprint: "abc"}, (&counter{}).run)
	if errCode(err) != idem.CodeInvalidPayload {
		t.Errorf("got %v; want INVALID_PAYLOAD", err)
	}
}

func TestCompletionWriteHasItsOwnRetryBudget(t *testing.T) {
	fs := &faultStore{complete: func(n int64) error {
		if n == 1 {
			return idem.Transient(errWire) // one throttle
		}
		return nil
	}}
	f := newFixture(t, withStore(fs), func(o *idem.Options) { o.Retry.AttemptsPerDelivery = 1 })
	out, err := f.engine.Do(context.Background(), req(t, "evt:budget-2:notify", `{}`), (&counter{}).run)
	if err != nil || !out.Stored {
		t.Fatalf("got %+v %v; want a stored success despite one attempt per delivery", out, err)
	}
}

func TestRetentionNeverEndsBeforeTheLease(t *testing.T) {
	f := newFixture(t, func(o *idem.Options) { o.Retention = time.Second; o.Lease = time.Minute })
	r := req(t, "evt:short-ttl:notify", `{}`)
	started := make(chan struct{})
	go func() {
		_, _ = f.engine.Do(context.Background(), r, func(context.Context) ([]byte, error) {
			close(started)
			<-dead(t)
			return nil, errBoom
		})
	}()
	<-started
	f.clock.Advance(2 * time.Second) // past the retention, inside the lease
	act := &counter{}
	if _, err := f.engine.Do(context.Background(), r, act.run); !errors.Is(err, idem.ErrInProgress) || act.calls.Load() != 0 {
		t.Fatalf("got %v, calls %d; want IN_PROGRESS: the owner's lease is live", err, act.calls.Load())
	}
}

func TestLongDetailsAreCutOnCharacterBoundaries(t *testing.T) {
	f := newFixture(t)
	msg := strings.Repeat("a", 1023) + "é" + strings.Repeat("b", 100) // é straddles byte 1024
	f.engine.Do(context.Background(), req(t, "evt:long-1:notify", `{}`), (&counter{script: []error{idem.Permanent(errors.New(msg))}}).run)
	logs := f.logs.String()
	if !utf8.ValidString(logs) || !strings.Contains(logs, "detail="+strings.Repeat("a", 1023)+"\n") {
		t.Errorf("logs %q; want the detail cut to 1023 bytes before the é", logs)
	}
}

// TestStoredFailuresAreCallerSafe: what a failure stores (and replays to
// API callers on every delivery) is its code and a fixed sentence; hosts,
// tables, panic values and the last error go to the failed attempt's log
// line, with the key, and nowhere else.
func TestStoredFailuresAreCallerSafe(t *testing.T) {
	const canary = "10.0.3.7:8443"
	tests := []struct {
		name string
		code idem.Code
		mod  func(*idem.Options, *faultStore)
		act  func(context.Context) ([]byte, error)
	}{
		{"an unclassified transport error", idem.CodePermanentFailure, nil, func(context.Context) ([]byte, error) {
			return nil, errors.New("notify: POST to https://" + canary + ": tls: handshake failure")
		}},
		{"a panic", idem.CodePanic, nil, func(context.Context) ([]byte, error) {
			panic("the secret at " + canary)
		}},
		{"the last error, attempts used up", idem.CodeRetryExhausted, func(o *idem.Options, _ *faultStore) {
			o.Retry = idem.RetryPolicy{AttemptsPerDelivery: 1, AttemptsPerKey: 1}
		}, func(context.Context) ([]byte, error) {
			return nil, idem.Transient(errors.New("dial tcp " + canary + ": connection refused"))
		}},
		{"an action's write that failed its condition", idem.CodeEffectConditionFailed, func(_ *idem.Options, fs *faultStore) {
			fs.complete = func(int64) error {
				return idem.PermanentCode(idem.CodeEffectConditionFailed, errors.New("write #0 on table ledger-"+canary+" failed its condition"))
			}
		}, func(context.Context) ([]byte, error) { return []byte(`{}`), nil }},
		{"an unknown outcome", idem.CodeOutcomeUnknown, nil, func(context.Context) ([]byte, error) {
			return nil, idem.OutcomeUnknown(errors.New("POST to https://" + canary + ": connection reset"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &faultStore{}
			f := newFixture(t, withStore(fs), func(o *idem.Options) {
				if tt.mod != nil {
					tt.mod(o, fs)
				}
			})
			key := "evt:safe-1:notify"
			out, _ := f.engine.Do(context.Background(), req(t, key, `{}`), tt.act)
			again, _ := f.engine.Do(context.Background(), req(t, key, `{}`), tt.act)
			rec := get(t, f, key)
			want := idem.Sentence(tt.code)
			if out.Err == nil || out.Err.Code != tt.code || out.Err.Message != want || rec.ErrorMessage != want || again.Err == nil || again.Err.Message != want {
				t.Fatalf("first %v, replay %v, stored %s %q; want %s with %q every time", out.Err, again.Err, rec.ErrorCode, rec.ErrorMessage, tt.code, want)
			}
			logs := f.logs.String()
			if !strings.Contains(logs, `msg="attempt failed" key=`+key+` code=`+string(tt.code)) || !strings.Contains(logs, canary) {
				t.Errorf("logs %s; want the attempt's line with the key, the code and the detail", logs)
			}
		})
	}
}

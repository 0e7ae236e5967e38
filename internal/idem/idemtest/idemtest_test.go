package idemtest_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/idem/idemtest"
	"github.com/oncely/oncely/internal/idem/memstore"
)

// The suite checks itself against the reference store.
func TestRunStoreTestsOnMemstore(t *testing.T) {
	idemtest.RunStoreTests(t, func(*testing.T) idem.Store { return memstore.New() })
	s := memstore.New()
	idemtest.RunPoisonTests(t, s)
	if len(s.Poisons()) != 1 {
		t.Errorf("poison notes %v; want 1", s.Poisons())
	}
}

// Broken stores each break one rule. The suite must catch every one: a
// conformance test that cannot fail proves nothing.
var broken = map[string]struct {
	store    func() idem.Store
	mustFail []string
}{
	"unfenced": {func() idem.Store { return unfenced{memstore.New()} },
		[]string{"CompleteAndFailFencedByToken", "ExpiredLeaseTakenOver", "ConcurrentTakeOverHasOneWinner"}},
	"racy-reserve": {func() idem.Store { return &racyReserve{Store: memstore.New()} },
		[]string{"ConcurrentReserveHasOneWinner"}},
	"drops-falsy": {func() idem.Store { return dropsFalsy{memstore.New()} },
		[]string{"ResultsOfEveryShapeRoundTrip"}},
	"ignores-expiry": {func() idem.Store { return ignoresExpiry{memstore.New()} },
		[]string{"ExpiredRetentionCountsAsAbsent"}},
	"no-cas": {func() idem.Store { return noCAS{memstore.New()} },
		[]string{"TakeOverIsCompareAndSwap", "LiveLeaseCannotBeTakenOver", "ConcurrentTakeOverHasOneWinner"}},
	"erroring": {func() idem.Store { return erroring{} },
		[]string{"ReserveFreshKey", "DuplicateOfInProgressKey", "DuplicateOfSucceededKey", "DuplicateOfFailedKey",
			"KeyReusedWithOtherFingerprintNeverOverwrites", "ExpiredLeaseTakenOver", "RetryableFailureTakenOver",
			"TakeOverIsCompareAndSwap", "LiveLeaseCannotBeTakenOver", "ExpiredRetentionCountsAsAbsent",
			"CompleteAndFailFencedByToken", "CompleteTwiceWithSameToken", "ConcurrentReserveHasOneWinner",
			"ConcurrentTakeOverHasOneWinner", "ResultsOfEveryShapeRoundTrip", "GetMissingKey", "RepeatedWriteWithOwnTokenIsOwned"}},
	"forgets-attempts": {func() idem.Store { return forgetsAttempts{memstore.New()} },
		[]string{"ExpiredLeaseTakenOver", "RetryableFailureTakenOver", "RepeatedWriteWithOwnTokenIsOwned"}},
	"loses-failures": {func() idem.Store { return losesFailures{memstore.New()} },
		[]string{"DuplicateOfFailedKey", "RetryableFailureTakenOver"}},
	"owns-nothing-twice": {func() idem.Store { return ownsNothingTwice{memstore.New()} },
		[]string{"RepeatedWriteWithOwnTokenIsOwned"}},
}

func TestBrokenStore(t *testing.T) {
	name := os.Getenv("IDEMTEST_BROKEN")
	if name == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	idemtest.RunStoreTests(t, func(*testing.T) idem.Store { return broken[name].store() })
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			args := []string{"-test.run=^TestBrokenStore$", "-test.v"}
			// Under go test -cover, the child's counters join this package's
			// coverage: the failure branches it runs are real executions.
			if f := flag.Lookup("test.gocoverdir"); f != nil && f.Value.String() != "" {
				args = append(args, "-test.gocoverdir="+f.Value.String())
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "IDEMTEST_BROKEN="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a store that breaks %q:\n%s", name, out)
			}
			for _, test := range b.mustFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenStore/"+test) {
					t.Errorf("%s did not fail for store %q", test, name)
				}
			}
		})
	}
}

type unfenced struct{ *memstore.Store }

// Complete ignores the token, as every Powertools runtime does.
func (s unfenced) Complete(ctx context.Context, f idem.Finish) error {
	if rec, ok, _ := s.Store.Get(ctx, f.Key, f.Now); ok {
		f.Token = rec.Token
	}
	return s.Store.Complete(ctx, f)
}

func (s unfenced) Fail(ctx context.Context, f idem.Finish) error {
	if rec, ok, _ := s.Store.Get(ctx, f.Key, f.Now); ok {
		f.Token = rec.Token
	}
	return s.Store.Fail(ctx, f)
}

// racyReserve checks, then acts: two callers can both see an empty slot.
type racyReserve struct {
	idem.Store
}

func (s *racyReserve) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if rec, ok, _ := s.Store.Get(ctx, r.Key, r.Now); ok {
		return rec, false, nil
	}
	time.Sleep(time.Millisecond)
	// Write unconditionally: make the slot look expired to the real store.
	far := r
	far.Now = r.Now.Add(1000 * time.Hour)
	rec, _, err := s.Store.Reserve(ctx, far)
	rec.CreatedAt, rec.UpdatedAt = r.Now, r.Now
	return rec, err == nil, err
}

type dropsFalsy struct{ *memstore.Store }

func (s dropsFalsy) Complete(ctx context.Context, f idem.Finish) error {
	switch string(f.Result) {
	case "0", "false", `""`, "{}", "[]", "null", "":
		f.Result = nil
	}
	return s.Store.Complete(ctx, f)
}

func (s dropsFalsy) Get(ctx context.Context, key string, now time.Time) (idem.Record, bool, error) {
	rec, ok, err := s.Store.Get(ctx, key, now)
	if len(rec.Result) == 0 {
		rec.Result = nil
	}
	return rec, ok, err
}

type ignoresExpiry struct{ *memstore.Store }

func (s ignoresExpiry) Get(ctx context.Context, key string, now time.Time) (idem.Record, bool, error) {
	return s.Store.Get(ctx, key, time.Time{})
}

func (s ignoresExpiry) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	rec, ok, err := s.Store.Get(ctx, r.Key, time.Time{})
	if ok {
		return rec, false, err
	}
	return s.Store.Reserve(ctx, r)
}

// noCAS takes over whatever record is there.
type noCAS struct{ *memstore.Store }

func (s noCAS) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	cur, ok, _ := s.Store.Get(ctx, r.Key, r.Now)
	if !ok {
		return idem.Record{}, false, nil
	}
	// Pretend the current record is the one judged, and make it look claimable.
	_ = s.Store.Fail(ctx, idem.Finish{Key: r.Key, Token: cur.Token, Now: r.Now, Attempts: cur.Attempts, ExpiresAt: cur.ExpiresAt, Retryable: true, ErrorCode: "X"})
	cur.Status, cur.Retryable = idem.StatusFailed, true
	return s.Store.TakeOver(ctx, cur, r)
}

var errDown = errors.New("store down")

// erroring fails every call.
type erroring struct{}

func (erroring) Reserve(context.Context, idem.Reservation) (idem.Record, bool, error) {
	return idem.Record{}, false, errDown
}
func (erroring) TakeOver(context.Context, idem.Record, idem.Reservation) (idem.Record, bool, error) {
	return idem.Record{}, false, errDown
}
func (erroring) Complete(context.Context, idem.Finish) error { return errDown }
func (erroring) Fail(context.Context, idem.Finish) error     { return errDown }
func (erroring) Get(context.Context, string, time.Time) (idem.Record, bool, error) {
	return idem.Record{}, false, errDown
}

// forgetsAttempts restarts the count at every take-over.
type forgetsAttempts struct{ *memstore.Store }

func (s forgetsAttempts) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	prev.Attempts = 0
	rec, ok, err := s.Store.TakeOver(ctx, prev, r)
	rec.Attempts = 1
	return rec, ok, err
}

// losesFailures stores a failure without its code and retryability.
type losesFailures struct{ *memstore.Store }

func (s losesFailures) Fail(ctx context.Context, f idem.Finish) error {
	f.ErrorCode, f.ErrorMessage, f.Retryable = "", "", false
	return s.Store.Fail(ctx, f)
}

// ownsNothingTwice refuses a repeated write of the owner's own token.
type ownsNothingTwice struct{ *memstore.Store }

func (s ownsNothingTwice) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if rec, ok, _ := s.Store.Get(ctx, r.Key, r.Now); ok && rec.Token == r.Token {
		return rec, false, nil
	}
	return s.Store.Reserve(ctx, r)
}

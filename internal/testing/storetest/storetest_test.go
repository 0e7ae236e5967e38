package storetest_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/internal/testing/memstore"
	"github.com/oncely/oncely/internal/testing/storetest"
	conformance "github.com/oncely/oncely/storetest"
)

// The suites check themselves against the reference store: the public
// store contract's (package storetest, with poison notes) and the
// operators'.
func TestRunStoreTestsOnMemstore(t *testing.T) {
	s := memstore.New()
	conformance.Run(t, conformance.Harness{
		NewStore: func(*testing.T) idem.Store { return memstore.New() },
		Poison:   func(*testing.T) idem.PoisonStore { return s },
	})
	if len(s.Poisons()) != 2 {
		t.Errorf("poison notes %v; want the suite's 2 (each stored twice, kept once)", s.Poisons())
	}
	storetest.RunOperatorTests(t, func(*testing.T) storetest.OperatorStore { return memstore.New() })
}

// Broken stores each break one rule. The suite must catch every one: a
// conformance test that cannot fail proves nothing.
var broken = map[string]struct {
	store    func() idem.Store
	mustFail []string
	faulty   func(k faults.Kind) idem.Store // nil: no classification tests
}{
	"ownsFinished": {store: func() idem.Store { return ownsFinished{memstore.New()} },
		mustFail: []string{"OwnTokenOnAFinishedRecordIsNotOwnership"}},
	"takesOverExpired": {store: func() idem.Store { return takesOverExpired{memstore.New()} },
		mustFail: []string{"ExpiredRecordIsNotTakenOver"}},
	"misclassifies": {store: func() idem.Store { return memstore.New() }, faulty: func(faults.Kind) idem.Store { return erroring{} },
		mustFail: []string{"ErrorsAreClassified/throttle", "ErrorsAreClassified/drop_reply", "ErrorsAreClassified/missing_table"}},
	"everythingTransient": {store: func() idem.Store { return memstore.New() }, faulty: func(faults.Kind) idem.Store { return transientOnly{} },
		mustFail: []string{"ErrorsAreClassified/drop_reply", "ErrorsAreClassified/missing_table", "ErrorsAreClassified/access_denied"}},
	"unfenced": {store: func() idem.Store { return unfenced{memstore.New()} },
		mustFail: []string{"CompleteAndFailFencedByToken", "ExpiredLeaseTakenOver", "ConcurrentTakeOverHasOneWinner"}},
	"racy-reserve": {store: func() idem.Store { return &racyReserve{Store: memstore.New()} },
		mustFail: []string{"ConcurrentReserveHasOneWinner"}},
	"drops-falsy": {store: func() idem.Store { return dropsFalsy{memstore.New()} },
		mustFail: []string{"ResultsOfEveryShapeRoundTrip"}},
	"ignores-expiry": {store: func() idem.Store { return ignoresExpiry{memstore.New()} },
		mustFail: []string{"ExpiredRetentionCountsAsAbsent"}},
	"no-cas": {store: func() idem.Store { return noCAS{memstore.New()} },
		mustFail: []string{"TakeOverIsCompareAndSwap", "LiveLeaseCannotBeTakenOver", "ConcurrentTakeOverHasOneWinner"}},
	"erroring": {store: func() idem.Store { return erroring{} },
		mustFail: []string{"ReserveFreshKey", "DuplicateOfInProgressKey", "DuplicateOfSucceededKey", "DuplicateOfFailedKey",
			"KeyReusedWithOtherFingerprintNeverOverwrites", "ExpiredLeaseTakenOver", "RetryableFailureTakenOver",
			"TakeOverIsCompareAndSwap", "LiveLeaseCannotBeTakenOver", "ExpiredRetentionCountsAsAbsent",
			"CompleteAndFailFencedByToken", "CompleteTwiceWithSameToken", "ConcurrentReserveHasOneWinner",
			"ConcurrentTakeOverHasOneWinner", "ResultsOfEveryShapeRoundTrip", "GetMissingKey", "RepeatedWriteWithOwnTokenIsOwned"}},
	"forgets-attempts": {store: func() idem.Store { return forgetsAttempts{memstore.New()} },
		mustFail: []string{"ExpiredLeaseTakenOver", "RetryableFailureTakenOver", "RepeatedWriteWithOwnTokenIsOwned"}},
	"drops-hold": {store: func() idem.Store { return dropsHold{memstore.New()} },
		mustFail: []string{"HoldOffRefusesReservationsUntilItEnds"}},
	"takes-over-held": {store: func() idem.Store { return takesOverHeld{memstore.New()} },
		mustFail: []string{"HoldOffRefusesReservationsUntilItEnds"}},
	"loses-failures": {store: func() idem.Store { return losesFailures{memstore.New()} },
		mustFail: []string{"DuplicateOfFailedKey", "RetryableFailureTakenOver"}},
	"owns-nothing-twice": {store: func() idem.Store { return ownsNothingTwice{memstore.New()} },
		mustFail: []string{"RepeatedWriteWithOwnTokenIsOwned"}},
	"drops-audit": {store: func() idem.Store { return dropsAudit{Store: memstore.New(), taken: &sync.Map{}} },
		mustFail: []string{"TakeOverKeepsTheAudit"}},
	"releases-blindly": {store: func() idem.Store { return releasesBlindly{memstore.New()} },
		mustFail: []string{"ReleaseLiveLeaseRefused", "ReleaseSucceededRefused", "ReleaseIsCompareAndSwap", "ReleaseRacingTakeOverHasOneWinner"}},
	"forgets-blindly": {store: func() idem.Store { return forgetsBlindly{memstore.New()} },
		mustFail: []string{"ForgetLiveLeaseRefused", "ForgetIsCompareAndSwap"}},
	"claimable-only": {store: func() idem.Store { return claimableOnly{memstore.New()} },
		mustFail: []string{"TakeOverIsCompareAndSwap"}},
	"forgets-its-own-writes": {store: func() idem.Store { return forgetsOwnWrites{memstore.New()} },
		mustFail: []string{"ReleaseResentIsRecognised", "ForgetResentIsRecognised"}},
	"re-releases": {store: func() idem.Store { return reReleases{memstore.New()} },
		mustFail: []string{"ReleaseOfAReleasedRecordChangesNothing"}},
	"forgets-successes": {store: func() idem.Store { return forgetsSuccesses{memstore.New()} },
		mustFail: []string{"ForgetSucceededOnlyWithConsent"}},
	"ignores-unknown-outcomes": {store: func() idem.Store { return ignoresUnknownOutcomes{memstore.New()} },
		mustFail: []string{"UnknownOutcomeOnlyWithConsent"}},
	"takes-other-consents": {store: func() idem.Store { return takesOtherConsents{memstore.New()} },
		mustFail: []string{"UnknownOutcomeOnlyWithConsent"}},
	"judges-the-copy": {store: func() idem.Store { return judgesTheCopy{memstore.New()} },
		mustFail: rewrittenCases},
}

// rewrittenCases are the operator suite's cases of a failure rewritten
// since the operator's read, each for a release and a forget.
var rewrittenCases = func() []string {
	var names []string
	for _, c := range []string{"outcome_unknown_over_a_retryable_failure", "retryable_failure_over_an_outcome_unknown", "permanent_failure_made_retryable"} {
		for _, op := range []string{"release", "forget"} {
			names = append(names, "FailureRewrittenSinceTheReadIsRefused/"+c+"/"+op)
		}
	}
	return names
}()

func TestBrokenStore(t *testing.T) {
	name := os.Getenv("IDEMTEST_BROKEN")
	if name == "" {
		t.Skip("run by TestSuiteCatchesBrokenStores")
	}
	b := broken[name]
	h := conformance.Harness{NewStore: func(*testing.T) idem.Store { return b.store() }}
	if b.faulty != nil {
		h.NewFaulty = func(_ *testing.T, f conformance.Fault) (idem.Store, string) {
			return b.faulty(faults.Kind(f)), "the-table"
		}
	}
	conformance.Run(t, h)
	if _, ok := b.store().(storetest.OperatorStore); ok {
		storetest.RunOperatorTests(t, func(*testing.T) storetest.OperatorStore { return b.store().(storetest.OperatorStore) })
	}
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
				if !failed(string(out), "TestBrokenStore", test) {
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

// dropsHold stores a failure without its hold-off.
type dropsHold struct{ *memstore.Store }

func (s dropsHold) Fail(ctx context.Context, f idem.Finish) error {
	f.HoldUntil = time.Time{}
	return s.Store.Fail(ctx, f)
}

// takesOverHeld judges a take-over by the caller's copy of the record: a
// caller blind to the hold-off takes the key over during it.
type takesOverHeld struct{ *memstore.Store }

func (s takesOverHeld) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	if prev.Claimable(r.Now) && prev.Status == idem.StatusFailed {
		// Swap at the stored hold-off's end, as if now were past it.
		if cur, ok, _ := s.Store.Get(ctx, r.Key, r.Now); ok && cur.HoldUntil.After(r.Now) {
			r.Now = cur.HoldUntil
		}
	}
	return s.Store.TakeOver(ctx, prev, r)
}

// ownsNothingTwice refuses a repeated write of the owner's own token.
type ownsNothingTwice struct{ *memstore.Store }

func (s ownsNothingTwice) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if rec, ok, _ := s.Store.Get(ctx, r.Key, r.Now); ok && rec.Token == r.Token {
		return rec, false, nil
	}
	return s.Store.Reserve(ctx, r)
}

// ownsFinished reports ownership for any record under the caller's token.
type ownsFinished struct{ *memstore.Store }

func (s ownsFinished) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	rec, ok, err := s.Store.Reserve(ctx, r)
	return rec, ok || rec.Token == r.Token, err
}

// takesOverExpired swaps an expired record in place instead of refusing.
type takesOverExpired struct{ *memstore.Store }

func (s takesOverExpired) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	if _, ok, _ := s.Store.Get(ctx, r.Key, r.Now); !ok {
		rec, _, err := s.Store.Reserve(ctx, r)
		return rec, err == nil, err
	}
	return s.Store.TakeOver(ctx, prev, r)
}

// transientOnly marks every error transient, the lost reply and the
// missing table included.
type transientOnly struct{}

var errTransient = idem.Transient(errors.New("something failed on the-table"))

func (transientOnly) Reserve(context.Context, idem.Reservation) (idem.Record, bool, error) {
	return idem.Record{}, false, errTransient
}
func (transientOnly) TakeOver(context.Context, idem.Record, idem.Reservation) (idem.Record, bool, error) {
	return idem.Record{}, false, errTransient
}
func (transientOnly) Complete(context.Context, idem.Finish) error { return errTransient }
func (transientOnly) Fail(context.Context, idem.Finish) error     { return errTransient }
func (transientOnly) Get(context.Context, string, time.Time) (idem.Record, bool, error) {
	return idem.Record{}, false, errTransient
}

// memEffects is an in-memory EffectStore for the effect suite's own tests:
// effects are names of items to create, on the condition that they are new.
type memEffects struct {
	*memstore.Store
	mu    sync.Mutex
	items map[string]bool
	bug   string // "", "unfenced", "torn", "repeat-fails"
}

type writes []string

func (w writes) Len() int { return len(w) }

func (m *memEffects) CompleteWithEffects(ctx context.Context, f idem.Finish, eff idem.Effects) error {
	w := eff.(writes)
	seen := map[string]bool{}
	for _, name := range w {
		if seen[name] || len(w) > 5 {
			return idem.PermanentCode(idem.CodeInvalidEffects, errors.New("too many, or one item twice"))
		}
		seen[name] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok, _ := m.Get(ctx, f.Key, f.Now)
	if m.bug != "unfenced" && (!ok || rec.Token != f.Token || rec.Status != idem.StatusInProgress) {
		if ok && rec.Status == idem.StatusSucceeded && rec.Token == f.Token && m.bug != "repeat-fails" {
			return nil
		}
		return idem.ErrLeaseLost
	}
	for _, name := range w {
		if m.bug == "torn" {
			defer func() { m.items[name] = true }()
		}
		if m.items[name] {
			return idem.PermanentCode(idem.CodeEffectConditionFailed, errors.New(name+" exists"))
		}
	}
	for _, name := range w {
		m.items[name] = true
	}
	f.Token = rec.Token
	return m.Store.Complete(ctx, f)
}

func effectHarness(bug string) conformance.Harness {
	m := &memEffects{Store: memstore.New(), items: map[string]bool{}, bug: bug}
	return conformance.Harness{NewStore: func(*testing.T) idem.Store { return m }, Effects: func(*testing.T) conformance.EffectHarness {
		return effects(m)
	}}
}

func effects(m *memEffects) conformance.EffectHarness {
	return conformance.EffectHarness{
		Store:  m,
		Write:  func(_ *testing.T, name string) idem.Effects { return writes{name} },
		Exists: func(_ *testing.T, name string) bool { m.mu.Lock(); defer m.mu.Unlock(); return m.items[name] },
		Conflict: func(_ *testing.T, name string) idem.Effects {
			m.mu.Lock()
			m.items[name+"-taken"] = true
			m.mu.Unlock()
			return writes{name, name + "-taken"}
		},
		TooMany: func(_ *testing.T, p string) idem.Effects {
			return writes{p + "1", p + "2", p + "3", p + "4", p + "5", p + "6"}
		},
		Twice: func(_ *testing.T, name string) idem.Effects { return writes{name, name} },
	}
}

func TestRunEffectTestsOnAReferenceStore(t *testing.T) {
	conformance.Run(t, effectHarness(""))
}

func TestBrokenEffectStore(t *testing.T) {
	bug := os.Getenv("IDEMTEST_BROKEN_EFFECTS")
	if bug == "" {
		t.Skip("run by TestEffectSuiteCatchesBrokenStores")
	}
	conformance.Run(t, effectHarness(bug))
}

func TestEffectSuiteCatchesBrokenStores(t *testing.T) {
	for bug, mustFail := range map[string][]string{
		"unfenced":     {"StaleOwnerAppliesNothing", "FinishedRecordAppliesNothing", "RacingOwnersCommitOnce"},
		"torn":         {"FailedConditionAppliesNothing"},
		"repeat-fails": {"RepeatAfterUnknownOutcomeIsSuccess"},
	} {
		t.Run(bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenEffectStore$", "-test.v")
			cmd.Env = append(os.Environ(), "IDEMTEST_BROKEN_EFFECTS="+bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the effect suite passed a store that is %q:\n%s", bug, out)
			}
			for _, test := range mustFail {
				if !failed(string(out), "TestBrokenEffectStore", test) {
					t.Errorf("%s did not fail for a %q store:\n%s", test, bug, out)
				}
			}
		})
	}
}

// dropsAudit loses the audit at a take-over, as a driver that builds the
// new record from scratch would: after its first take-over of a key, the
// key reads back without its audit.
type dropsAudit struct {
	*memstore.Store
	taken *sync.Map
}

func (s dropsAudit) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	rec, ok, err := s.Store.TakeOver(ctx, prev, r)
	if ok {
		s.taken.Store(r.Key, true)
		rec.Audit = ""
	}
	return rec, ok, err
}

func (s dropsAudit) Get(ctx context.Context, key string, now time.Time) (idem.Record, bool, error) {
	rec, ok, err := s.Store.Get(ctx, key, now)
	if _, taken := s.taken.Load(key); taken {
		rec.Audit = ""
	}
	return rec, ok, err
}

// releasesBlindly releases whatever record is stored now, live or
// succeeded, without comparing it with what the operator saw.
type releasesBlindly struct{ *memstore.Store }

func (s releasesBlindly) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	cur, ok, err := s.Store.Get(ctx, prev.Key, r.Now)
	if !ok || err != nil {
		return cur, false, err
	}
	if cur.Status == idem.StatusSucceeded {
		// Turn it into something memstore will release.
		_, _, _ = s.Store.Forget(ctx, cur, idem.Forget{Now: r.Now})
		cur.Status, cur.Attempts = idem.StatusFailed, 0
		return idem.Released(cur, r), true, nil
	}
	r.Force = true
	return s.Store.Release(ctx, cur, r)
}

// forgetsBlindly deletes whatever record is stored now.
type forgetsBlindly struct{ *memstore.Store }

func (s forgetsBlindly) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	cur, ok, err := s.Store.Get(ctx, prev.Key, f.Now)
	if !ok || err != nil {
		return cur, false, err
	}
	// Make the live lease look ended to the real store, then delete.
	return s.Store.Forget(ctx, cur, idem.Forget{Now: cur.LeaseUntil.Add(time.Millisecond)})
}

// forgetsOwnWrites does not recognise a re-sent release or forget: its
// compare-and-swap fails against its own earlier write and reports a race.
type forgetsOwnWrites struct{ *memstore.Store }

func (s forgetsOwnWrites) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	if cur, ok, err := s.Store.Get(ctx, prev.Key, r.Now); err == nil && ok && cur.Token == r.Token {
		return cur, false, nil
	}
	return s.Store.Release(ctx, prev, r)
}

func (s forgetsOwnWrites) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	f.Token = ""
	return s.Store.Forget(ctx, prev, f)
}

// claimableOnly takes over whatever record is stored now if it is
// claimable, without comparing it with the one the engine judged.
type claimableOnly struct{ *memstore.Store }

func (s claimableOnly) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	cur, ok, err := s.Store.Get(ctx, r.Key, r.Now)
	if !ok || err != nil {
		return cur, false, err
	}
	return s.Store.TakeOver(ctx, cur, r)
}

// reReleases releases a released record again, as a store that checks the
// compare-and-swap but not the release rule would: a new token, a longer
// message.
type reReleases struct{ *memstore.Store }

func (s reReleases) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	cur, ok, err := s.Store.Get(ctx, prev.Key, r.Now)
	if err != nil || !ok || cur.ErrorCode != idem.CodeReleased || cur.Token != prev.Token {
		return s.Store.Release(ctx, prev, r)
	}
	res := idem.Reservation{Key: cur.Key, Fingerprint: cur.Fingerprint, Token: r.Token, Now: r.Now, LeaseUntil: r.Now, ExpiresAt: cur.ExpiresAt}
	if _, ok, err := s.Store.TakeOver(ctx, cur, res); err != nil || !ok {
		return cur, false, err
	}
	again := idem.Released(cur, r)
	err = s.Store.Fail(ctx, idem.Finish{Key: cur.Key, Token: r.Token, Now: r.Now, ExpiresAt: cur.ExpiresAt,
		ErrorCode: idem.CodeReleased, ErrorMessage: again.ErrorMessage, Retryable: true})
	return again, err == nil, err
}

// forgetsSuccesses forgets SUCCEEDED records without the operator's
// consent, so that their next delivery runs the action twice.
type forgetsSuccesses struct{ *memstore.Store }

func (s forgetsSuccesses) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	f.RerunSucceeded = true
	return s.Store.Forget(ctx, prev, f)
}

// ignoresUnknownOutcomes releases and forgets an OUTCOME_UNKNOWN record as
// if the operator had consented.
type ignoresUnknownOutcomes struct{ *memstore.Store }

func (s ignoresUnknownOutcomes) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	r.MayRepeatSideEffect = r.MayRepeatSideEffect || prev.ErrorCode == idem.CodeOutcomeUnknown
	return s.Store.Release(ctx, prev, r)
}

func (s ignoresUnknownOutcomes) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	f.MayRepeatSideEffect = f.MayRepeatSideEffect || prev.ErrorCode == idem.CodeOutcomeUnknown
	return s.Store.Forget(ctx, prev, f)
}

// takesOtherConsents takes Force (a live lease's) or RerunSucceeded (a
// success's) as consent to repeat an OUTCOME_UNKNOWN failure's side effect,
// as the stores did before that consent had its own name.
type takesOtherConsents struct{ *memstore.Store }

func (s takesOtherConsents) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	r.MayRepeatSideEffect = r.MayRepeatSideEffect || r.Force
	return s.Store.Release(ctx, prev, r)
}

func (s takesOtherConsents) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	f.MayRepeatSideEffect = f.MayRepeatSideEffect || f.RerunSucceeded
	return s.Store.Forget(ctx, prev, f)
}

// judgesTheCopy judges the operator's rule on the caller's copy and
// compares only the token, status and attempts, as ddbstore's condition did
// before it stated a failure's code and retryable flag: a failure rewritten
// under the same token since the read is released or forgotten as the one
// that was read.
type judgesTheCopy struct{ *memstore.Store }

// asStored is prev with the stored failure's code and retryable flag, so
// that the reference store's compare passes on them.
func (s judgesTheCopy) asStored(ctx context.Context, prev idem.Record, now time.Time) idem.Record {
	if cur, ok, err := s.Store.Get(ctx, prev.Key, now); err == nil && ok && prev.Status == idem.StatusFailed {
		prev.ErrorCode, prev.ErrorMessage, prev.Retryable = cur.ErrorCode, cur.ErrorMessage, cur.Retryable
	}
	return prev
}

func (s judgesTheCopy) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	if prev.Status != idem.StatusFailed || idem.Releasable(prev, r) != nil {
		return s.Store.Release(ctx, prev, r)
	}
	// The copy passed; the stored failure is not judged again.
	r.MayRepeatSideEffect = true
	return s.Store.Release(ctx, s.asStored(ctx, prev, r.Now), r)
}

func (s judgesTheCopy) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	if prev.Status != idem.StatusFailed || idem.Forgettable(prev, f) != nil {
		return s.Store.Forget(ctx, prev, f)
	}
	f.MayRepeatSideEffect = true
	return s.Store.Forget(ctx, s.asStored(ctx, prev, f.Now), f)
}

// TestAbandonedActionStaysFencedOnMemstore: the late return of an action
// the engine abandoned cannot overwrite the record of the delivery that
// took the key over (RunAbandonTests, on the reference store).
func TestAbandonedActionStaysFencedOnMemstore(t *testing.T) {
	storetest.RunAbandonTests(t, func(*testing.T) idem.Store { return memstore.New() })
}

// slowReservations is the reference store with reservations and take-overs
// as slow as a loaded machine can make them (under -race, with the cores
// busy, against a DynamoDB emulator): each takes longer than the abandon
// cases' 500 ms work window leaves above the engine's 200 ms minimum.
type slowReservations struct{ *memstore.Store }

const slowReservation = 400 * time.Millisecond

func (s slowReservations) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	time.Sleep(slowReservation)
	return s.Store.Reserve(ctx, r)
}

func (s slowReservations) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	time.Sleep(slowReservation)
	return s.Store.TakeOver(ctx, prev, r)
}

// TestAbandonCasesSurviveSlowReservations: the abandon cases' owners
// start their actions however long the reservation took, so a loaded
// machine cannot turn the first owner's ABANDONED, or the take-over's
// success, into DEADLINE. (With the engines on the real clock, both are
// DEADLINE here: 100 ms of the window left after the reservation.)
func TestAbandonCasesSurviveSlowReservations(t *testing.T) {
	storetest.RunAbandonTests(t, func(*testing.T) idem.Store { return slowReservations{memstore.New()} })
}

// failed reports whether a verbose test run's output says that subtest test
// of top failed, at any depth of the suites' grouping (Store/, Effects/,
// Poison/, or the operators' suite at the top).
func failed(out, top, test string) bool {
	for _, group := range []string{"", "Store/", "Effects/", "Poison/"} {
		if strings.Contains(out, "--- FAIL: "+top+"/"+group+test+" ") {
			return true
		}
	}
	return false
}

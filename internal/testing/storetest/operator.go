package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
)

// OperatorStore is a store with the operators' side (idem.Operator).
type OperatorStore interface {
	idem.Store
	idem.Operator
}

// testTakeOverKeepsAudit: an operator's audit survives the function's later
// writes. A take-over writes the whole record, so a store that builds the
// new record from scratch loses who released it and why.
func testTakeOverKeepsAudit(t *testing.T, s idem.Store) {
	op, ok := s.(idem.Operator)
	if !ok {
		t.Skip("the store has no idem.Operator: nothing writes an audit")
	}
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage = "HTTP_422", "422 from downstream"
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	const audit = `[{"op":"release","by":"arn:aws:iam::123456789012:user/ops","reason":"fixed"}]`
	released, ok, err := op.Release(context.Background(), mustGet(t, s, r.Key, now), idem.Release{Token: token(t), Now: now, Audit: audit})
	if err != nil || !ok {
		t.Fatalf("Release = ok %v, err %v; want released", ok, err)
	}
	next := reservation(t, r.Key, fpA, now.Add(time.Second))
	rec, ok, err := s.TakeOver(context.Background(), released, next)
	if err != nil || !ok {
		t.Fatalf("TakeOver of the released record = acquired %v, err %v; want acquired", ok, err)
	}
	if rec.Audit != audit {
		t.Errorf("TakeOver returned audit %q, want %q", rec.Audit, audit)
	}
	if got := mustGet(t, s, r.Key, next.Now).Audit; got != audit {
		t.Errorf("audit after the take-over got %q, want %q", got, audit)
	}
	done := finish(next, next.Now, 1)
	done.Result = []byte(`"ok"`)
	if err := s.Complete(context.Background(), done); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got := mustGet(t, s, r.Key, next.Now).Audit; got != audit {
		t.Errorf("audit after Complete got %q, want %q", got, audit)
	}
}

// RunOperatorTests checks the idem.Operator contract: release and forget
// act only on the record the operator saw, never on a live lease (unless
// forced, for release), and a release racing a take-over has one winner.
func RunOperatorTests(t *testing.T, newStore func(t *testing.T) OperatorStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s OperatorStore)
	}{
		{"TakeOverKeepsTheAudit", func(t *testing.T, s OperatorStore) { testTakeOverKeepsAudit(t, s) }},
		{"ReleaseFailedRecord", testReleaseFailed},
		{"ReleaseEndedLease", testReleaseEndedLease},
		{"ReleaseLiveLeaseRefused", testReleaseLiveLease},
		{"ReleaseLiveLeaseForcedFencesTheOwner", testReleaseForced},
		{"ReleaseSucceededRefused", testReleaseSucceeded},
		{"ReleaseIsCompareAndSwap", testReleaseCAS},
		{"ReleaseMissingOrExpired", testReleaseMissing},
		{"ReleaseAuditTooLarge", testReleaseAuditTooLarge},
		{"ReleaseRacingTakeOverHasOneWinner", testReleaseRace},
		{"ReleaseResentIsRecognised", testReleaseResent},
		{"ReleaseOfAReleasedRecordChangesNothing", testReleaseReleased},
		{"ForgetDeletes", testForget},
		{"ForgetLiveLeaseRefused", testForgetLive},
		{"ForgetSucceededOnlyWithConsent", testForgetSucceeded},
		{"UnknownOutcomeOnlyWithConsent", testUnknownOutcome},
		{"ForgetIsCompareAndSwap", testForgetCAS},
		{"ForgetResentIsRecognised", testForgetResent},
		{"ReleaseClearsTheHoldOff", testReleaseClearsHoldOff},
		{"FailureRewrittenSinceTheReadIsRefused", testFailureRewritten},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// failed stores a permanent failure after attempts executions and returns
// it as read back.
func failed(t *testing.T, s idem.Store, now time.Time, attempts int) (idem.Reservation, idem.Record) {
	t.Helper()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, attempts)
	f.ErrorCode, f.ErrorMessage = "HTTP_422", "422 from downstream"
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	return r, mustGet(t, s, r.Key, now)
}

func release(t *testing.T, now time.Time) idem.Release {
	return idem.Release{Token: token(t), Now: now, Audit: "audit " + token(t)}
}

func testReleaseFailed(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 3)
	later := now.Add(2 * time.Second)
	rel := release(t, later)
	rec, ok, err := s.Release(context.Background(), prev, rel)
	if err != nil || !ok {
		t.Fatalf("Release = ok %v, err %v; want released", ok, err)
	}
	want := idem.Released(prev, rel)
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("Release returned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, mustGet(t, s, prev.Key, later)); diff != "" {
		t.Errorf("Get after Release (-want +got):\n%s", diff)
	}
	// The next delivery takes it over and starts a fresh count.
	next := reservation(t, prev.Key, fpA, later)
	got, ok, err := s.TakeOver(context.Background(), rec, next)
	if err != nil || !ok || got.Attempts != 1 {
		t.Fatalf("TakeOver of the released record = acquired %v, attempts %d, err %v; want acquired at attempt 1", ok, got.Attempts, err)
	}
}

func testReleaseEndedLease(t *testing.T, s OperatorStore) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	prev := mustReserve(t, s, r)
	later := now.Add(2 * time.Second)
	rec, ok, err := s.Release(context.Background(), prev, release(t, later))
	if err != nil || !ok || rec.Status != idem.StatusFailed || !rec.Retryable || rec.Attempts != 0 {
		t.Fatalf("Release of an ended lease = %s retryable %v attempts %d, ok %v, err %v; want FAILED, retryable, 0 attempts", rec.Status, rec.Retryable, rec.Attempts, ok, err)
	}
	// The crashed owner, were it to wake up, is fenced off.
	stale := finish(r, later, 1)
	stale.Result = []byte(`"stale"`)
	if err := s.Complete(context.Background(), stale); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the previous owner's Complete after a release = %v; want LEASE_LOST", err)
	}
}

func testReleaseLiveLease(t *testing.T, s OperatorStore) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	prev := mustReserve(t, s, r)
	rec, ok, err := s.Release(context.Background(), prev, release(t, now.Add(time.Second)))
	if err != nil || ok {
		t.Fatalf("Release of a live lease = ok %v, err %v; want refused", ok, err)
	}
	if rec.Token != r.Token || rec.Status != idem.StatusInProgress {
		t.Errorf("refused Release returned %s token %s; want the live IN_PROGRESS record, token %s", rec.Status, rec.Token, r.Token)
	}
	if got := mustGet(t, s, r.Key, now); got.Token != r.Token || got.Status != idem.StatusInProgress {
		t.Errorf("refused Release changed the record: %s token %s", got.Status, got.Token)
	}
	// The owner is unaffected.
	f := finish(r, now, 1)
	f.Result = []byte(`"mine"`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Errorf("the owner's Complete after a refused release = %v; want nil", err)
	}
}

func testReleaseForced(t *testing.T, s OperatorStore) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	prev := mustReserve(t, s, r)
	rel := release(t, now.Add(time.Second))
	rel.Force = true
	rec, ok, err := s.Release(context.Background(), prev, rel)
	if err != nil || !ok || rec.Token != rel.Token {
		t.Fatalf("forced Release of a live lease = ok %v, token %s, err %v; want released under the new token", ok, rec.Token, err)
	}
	f := finish(r, now.Add(2*time.Second), 1)
	f.Result = []byte(`"late"`)
	if err := s.Complete(context.Background(), f); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("the fenced-off owner's Complete = %v; want LEASE_LOST", err)
	}
	if got := mustGet(t, s, r.Key, now); got.Status != idem.StatusFailed || got.ErrorCode != idem.CodeReleased {
		t.Errorf("after the owner's late Complete: %s %s; want FAILED RELEASED", got.Status, got.ErrorCode)
	}
}

// succeeded stores a success (result "done") and returns it as read back.
func succeeded(t *testing.T, s idem.Store, now time.Time) idem.Record {
	t.Helper()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.Result = []byte(`"done"`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	return mustGet(t, s, r.Key, now)
}

func testReleaseSucceeded(t *testing.T, s OperatorStore) {
	now := base()
	prev := succeeded(t, s, now)
	for _, force := range []bool{false, true} {
		rel := release(t, now)
		rel.Force = force
		rec, ok, err := s.Release(context.Background(), prev, rel)
		if err != nil || ok || rec.Status != idem.StatusSucceeded {
			t.Errorf("Release (force %v) of a SUCCEEDED record = %s, ok %v, err %v; want refused, SUCCEEDED returned", force, rec.Status, ok, err)
		}
	}
	if got := mustGet(t, s, prev.Key, now); got.Status != idem.StatusSucceeded || string(got.Result) != `"done"` {
		t.Errorf("refused Release changed the record: %s %q", got.Status, got.Result)
	}
}

func testReleaseCAS(t *testing.T, s OperatorStore) {
	now := base()
	tests := []struct {
		name   string
		change func(idem.Record) idem.Record
	}{
		{"other token", func(r idem.Record) idem.Record { r.Token = "not-the-token"; return r }},
		{"other status", func(r idem.Record) idem.Record { r.Status = idem.StatusInProgress; return r }},
		{"other attempts", func(r idem.Record) idem.Record { r.Attempts++; return r }},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			_, cur := failed(t, s, now, 1)
			rec, ok, err := s.Release(context.Background(), tt.change(cur), release(t, now))
			if err != nil || ok {
				t.Fatalf("Release of a record seen with %s = ok %v, err %v; want refused", tt.name, ok, err)
			}
			if diff := cmp.Diff(cur, rec); diff != "" {
				t.Errorf("refused Release returned (-want current +got):\n%s", diff)
			}
		})
	}
	// A take-over between the operator's read and the release: release a
	// failure once, let a delivery take it over, then release what was read.
	_, prev := failed(t, s, now, 1)
	r := reservation(t, prev.Key, fpA, now)
	rel, ok, err := s.Release(context.Background(), prev, release(t, now))
	if err != nil || !ok {
		t.Fatalf("first Release = ok %v, err %v; want released", ok, err)
	}
	if _, ok, err := s.TakeOver(context.Background(), rel, r); err != nil || !ok {
		t.Fatalf("TakeOver of the released record = acquired %v, err %v; want acquired", ok, err)
	}
	rec, ok, err := s.Release(context.Background(), rel, release(t, now))
	if err != nil || ok || rec.Token != r.Token {
		t.Errorf("Release of a record taken over since = ok %v, token %s, err %v; want refused, the new owner's record returned", ok, rec.Token, err)
	}
}

func testReleaseMissing(t *testing.T, s OperatorStore) {
	now := base()
	ghost := idem.Record{Key: uniqueKey(t), Status: idem.StatusFailed, Token: token(t), Attempts: 1, Fingerprint: fpA}
	if rec, ok, err := s.Release(context.Background(), ghost, release(t, now)); err != nil || ok || rec.Key != "" {
		t.Errorf("Release of a missing record = %+v, ok %v, err %v; want a zero record, refused", rec, ok, err)
	}
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil, r.ExpiresAt = now.Add(time.Second), now.Add(2*time.Second)
	prev := mustReserve(t, s, r)
	if rec, ok, err := s.Release(context.Background(), prev, release(t, now.Add(2*time.Second))); err != nil || ok || rec.Key != "" {
		t.Errorf("Release of an expired record = %+v, ok %v, err %v; want a zero record, refused (it counts as absent)", rec, ok, err)
	}
}

func testReleaseAuditTooLarge(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 1)
	rel := release(t, now)
	rel.Audit = strings.Repeat("a", idem.MaxAudit+1)
	if _, ok, err := s.Release(context.Background(), prev, rel); ok || idem.Classify(err) != idem.ClassPermanent {
		t.Errorf("Release with a %d-byte audit = ok %v, err %v; want a permanent error", len(rel.Audit), ok, err)
	}
	if got := mustGet(t, s, prev.Key, now); got.Token != prev.Token {
		t.Errorf("a refused Release changed the record")
	}
}

// testReleaseRace races operators releasing and deliveries taking over the
// same retryable record, both judging the same read: exactly one wins.
func testReleaseRace(t *testing.T, s OperatorStore) {
	const rounds, each = 8, 6
	now := base()
	for round := range rounds {
		r := reservation(t, uniqueKey(t), fpA, now)
		mustReserve(t, s, r)
		f := finish(r, now, 1)
		f.ErrorCode, f.Retryable = idem.CodeTransientFailure, true
		if err := s.Fail(context.Background(), f); err != nil {
			t.Fatal(err)
		}
		prev := mustGet(t, s, r.Key, now)
		var (
			wg                 sync.WaitGroup
			mu                 sync.Mutex
			released, takeOver int
			start              = make(chan struct{})
		)
		for range each {
			rel := release(t, now)
			next := reservation(t, r.Key, fpA, now)
			wg.Go(func() {
				<-start
				_, ok, err := s.Release(context.Background(), prev, rel)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Release: %v", err)
				}
				if ok {
					released++
				}
			})
			wg.Go(func() {
				<-start
				_, ok, err := s.TakeOver(context.Background(), prev, next)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("TakeOver: %v", err)
				}
				if ok {
					takeOver++
				}
			})
		}
		close(start)
		wg.Wait()
		if released+takeOver != 1 {
			t.Fatalf("round %d: %d releases and %d take-overs won; want exactly 1 winner", round, released, takeOver)
		}
	}
}

func testForget(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 1)
	rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Now: now, Audit: "why"})
	if err != nil || !ok || rec.Token != prev.Token {
		t.Fatalf("Forget = ok %v, token %s, err %v; want forgotten, the deleted record returned", ok, rec.Token, err)
	}
	if _, found, err := s.Get(context.Background(), prev.Key, now); err != nil || found {
		t.Fatalf("Get after Forget = found %v, err %v; want not found", found, err)
	}
	// A corrected event with another payload now runs.
	if _, ok, err := s.Reserve(context.Background(), reservation(t, prev.Key, fpB, now)); err != nil || !ok {
		t.Errorf("Reserve with a new payload after Forget = acquired %v, err %v; want acquired", ok, err)
	}
	if rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Now: now}); err != nil || ok || rec.Fingerprint != fpB {
		t.Errorf("second Forget of the old record = ok %v, fp %s, err %v; want refused, the new record returned", ok, rec.Fingerprint, err)
	}
}

func testForgetLive(t *testing.T, s OperatorStore) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	prev := mustReserve(t, s, r)
	rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Now: now.Add(time.Second)})
	if err != nil || ok || rec.Token != r.Token {
		t.Fatalf("Forget of a live lease = ok %v, token %s, err %v; want refused, the live record returned", ok, rec.Token, err)
	}
	if _, found, _ := s.Get(context.Background(), r.Key, now); !found {
		t.Errorf("a refused Forget deleted the record")
	}
}

func testForgetCAS(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 1)
	stale := prev
	stale.Token = token(t)
	if _, ok, err := s.Forget(context.Background(), stale, idem.Forget{Now: now}); err != nil || ok {
		t.Fatalf("Forget with another token = ok %v, err %v; want refused", ok, err)
	}
	stale = prev
	stale.Attempts = 7
	if _, ok, err := s.Forget(context.Background(), stale, idem.Forget{Now: now}); err != nil || ok {
		t.Fatalf("Forget with other attempts = ok %v, err %v; want refused", ok, err)
	}
	if _, found, _ := s.Get(context.Background(), prev.Key, now); !found {
		t.Errorf("a refused Forget deleted the record")
	}
}

// A release whose reply was lost is sent again with the same request; its
// compare-and-swap fails against its own write, which must still count as
// released (oncelyctl would otherwise report a race that never happened).
// Another request meeting that record is refused.
func testReleaseResent(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 2)
	rel := release(t, now.Add(time.Second))
	first, ok, err := s.Release(context.Background(), prev, rel)
	if err != nil || !ok {
		t.Fatalf("Release = ok %v, err %v; want released", ok, err)
	}
	again, ok, err := s.Release(context.Background(), prev, rel)
	if err != nil || !ok {
		t.Fatalf("the same Release sent again = ok %v, err %v; want released (its own write)", ok, err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("the re-sent Release returned (-first +again):\n%s", diff)
	}
	other := release(t, now.Add(time.Second))
	if rec, ok, err := s.Release(context.Background(), prev, other); err != nil || ok || rec.Token != rel.Token {
		t.Errorf("another Release of the record as it was = ok %v, token %s, err %v; want refused, the released record (token %s) returned", ok, rec.Token, err, rel.Token)
	}
}

// A forget sent again with the same token after its reply was lost counts
// as forgotten, even once the key has been reserved afresh; without a token,
// or with another, it is refused.
func testForgetResent(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 1)
	f := idem.Forget{Token: token(t), Now: now, Audit: "why"}
	if _, ok, err := s.Forget(context.Background(), prev, f); err != nil || !ok {
		t.Fatalf("Forget = ok %v, err %v; want forgotten", ok, err)
	}
	rec, ok, err := s.Forget(context.Background(), prev, f)
	if err != nil || !ok || rec.Token != prev.Token {
		t.Fatalf("the same Forget sent again = ok %v, token %s, err %v; want forgotten, prev returned", ok, rec.Token, err)
	}
	if _, ok, err := s.Forget(context.Background(), prev, idem.Forget{Token: token(t), Now: now}); err != nil || ok {
		t.Errorf("another Forget of the gone record = ok %v, err %v; want refused", ok, err)
	}
	if _, ok, err := s.Reserve(context.Background(), reservation(t, prev.Key, fpB, now)); err != nil || !ok {
		t.Fatalf("Reserve after Forget = acquired %v, err %v", ok, err)
	}
	if _, ok, err := s.Forget(context.Background(), prev, f); err != nil || !ok {
		t.Errorf("the same Forget sent again after a new reservation = ok %v, err %v; want forgotten (it happened)", ok, err)
	}
	if _, found, err := s.Get(context.Background(), prev.Key, now); err != nil || !found {
		t.Errorf("the re-sent Forget deleted the new reservation: found %v, err %v", found, err)
	}
}

// A release is idempotent: a released record waits for its next delivery,
// and releasing it again (another operator, the same one twice) writes
// nothing, where it used to give it a new token and a longer message.
func testReleaseReleased(t *testing.T, s OperatorStore) {
	now := base()
	_, prev := failed(t, s, now, 1)
	released, ok, err := s.Release(context.Background(), prev, release(t, now))
	if err != nil || !ok {
		t.Fatalf("Release = ok %v, err %v; want released", ok, err)
	}
	rec, ok, err := s.Release(context.Background(), released, release(t, now.Add(time.Second)))
	if err != nil || ok {
		t.Fatalf("Release of the released record = ok %v, err %v; want refused (nothing to do)", ok, err)
	}
	if diff := cmp.Diff(released, rec); diff != "" {
		t.Errorf("refused Release returned (-released +got):\n%s", diff)
	}
	if diff := cmp.Diff(released, mustGet(t, s, prev.Key, now)); diff != "" {
		t.Errorf("the record after a second release (-released +stored):\n%s", diff)
	}
}

// Forgetting a SUCCEEDED record lets its next delivery run the action a
// second time: the store refuses it unless the request consents
// (Forget.RerunSucceeded), and keeps the record.
func testForgetSucceeded(t *testing.T, s OperatorStore) {
	now := base()
	prev := succeeded(t, s, now)
	rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Token: token(t), Now: now, Audit: "why"})
	if err != nil || ok || rec.Status != idem.StatusSucceeded {
		t.Fatalf("Forget of a SUCCEEDED record without consent = %s, ok %v, err %v; want refused, the record returned", rec.Status, ok, err)
	}
	if got := mustGet(t, s, prev.Key, now); string(got.Result) != `"done"` {
		t.Fatalf("the refused Forget changed the record: %q", got.Result)
	}
	if _, ok, err := s.Forget(context.Background(), prev, idem.Forget{Token: token(t), Now: now, Audit: "why", RerunSucceeded: true}); err != nil || !ok {
		t.Fatalf("Forget of a SUCCEEDED record with consent = ok %v, err %v; want forgotten", ok, err)
	}
	if _, found, err := s.Get(context.Background(), prev.Key, now); err != nil || found {
		t.Errorf("Get after the consented Forget = found %v, err %v; want not found", found, err)
	}
}

// testUnknownOutcome: an OUTCOME_UNKNOWN failure's action may have had its
// side effect, so a release or a forget needs MayRepeatSideEffect, and the
// other consents (Force for a live lease, RerunSucceeded for a success) are
// not it; each refusal leaves the record as it was.
func testUnknownOutcome(t *testing.T, s OperatorStore) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage = idem.CodeOutcomeUnknown, "sent; no reply"
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	prev := mustGet(t, s, r.Key, now)
	if rec, ok, err := s.Release(context.Background(), prev, release(t, now)); err != nil || ok || rec.ErrorCode != idem.CodeOutcomeUnknown {
		t.Fatalf("Release of an OUTCOME_UNKNOWN record without consent = %s %s, ok %v, err %v; want refused, the record returned", rec.Status, rec.ErrorCode, ok, err)
	}
	if rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Token: token(t), Now: now, Audit: "why"}); err != nil || ok || rec.ErrorCode != idem.CodeOutcomeUnknown {
		t.Fatalf("Forget of an OUTCOME_UNKNOWN record without consent = %s %s, ok %v, err %v; want refused, the record returned", rec.Status, rec.ErrorCode, ok, err)
	}
	forced := release(t, now)
	forced.Force = true
	if rec, ok, err := s.Release(context.Background(), prev, forced); err != nil || ok || rec.ErrorCode != idem.CodeOutcomeUnknown {
		t.Fatalf("Release of an OUTCOME_UNKNOWN record with Force only = %s %s, ok %v, err %v; want refused (Force takes a live lease), the record returned", rec.Status, rec.ErrorCode, ok, err)
	}
	if rec, ok, err := s.Forget(context.Background(), prev, idem.Forget{Token: token(t), Now: now, Audit: "why", RerunSucceeded: true}); err != nil || ok || rec.ErrorCode != idem.CodeOutcomeUnknown {
		t.Fatalf("Forget of an OUTCOME_UNKNOWN record with RerunSucceeded only = %s %s, ok %v, err %v; want refused (that consent re-runs a success), the record returned", rec.Status, rec.ErrorCode, ok, err)
	}
	if got := mustGet(t, s, r.Key, now); got.ErrorCode != idem.CodeOutcomeUnknown || got.Token != prev.Token {
		t.Fatalf("the refusals changed the record: %s %s", got.Status, got.ErrorCode)
	}
	rel := release(t, now)
	rel.MayRepeatSideEffect = true
	if rec, ok, err := s.Release(context.Background(), prev, rel); err != nil || !ok || rec.ErrorCode != idem.CodeReleased {
		t.Fatalf("Release of an OUTCOME_UNKNOWN record with MayRepeatSideEffect = %s %s, ok %v, err %v; want released", rec.Status, rec.ErrorCode, ok, err)
	}
}

// testFailureRewritten: the failure an operator read was rewritten under the
// same token, status and attempts before the write (another code, another
// retryable flag). The rule (Releasable, Forgettable) was judged on the
// failure as read, so the store must refuse: a store that compares only the
// token, status and attempts, and judges the rule on the caller's copy,
// releases and forgets an OUTCOME_UNKNOWN failure that nobody consented to
// send again. Each case stores the failure as it is now and passes the
// failure as it was read, with the consent its read needed.
func testFailureRewritten(t *testing.T, s OperatorStore) {
	now := base()
	type failure struct {
		code      idem.Code
		retryable bool
	}
	tests := []struct {
		name       string
		read, now  failure
		consent    bool // the consent the read needed (an OUTCOME_UNKNOWN read)
		verdictNow string
	}{
		{"outcome unknown over a retryable failure", failure{idem.CodeTransientFailure, true}, failure{idem.CodeOutcomeUnknown, false}, false,
			"the stored failure needs consent that was not given"},
		{"retryable failure over an outcome unknown", failure{idem.CodeOutcomeUnknown, false}, failure{idem.CodeTransientFailure, true}, true,
			"the consent was given for a failure that is not there"},
		{"permanent failure made retryable", failure{"HTTP_422", false}, failure{"HTTP_422", true}, false,
			"the retryable flag the operator saw changed"},
	}
	for _, tt := range tests {
		for _, op := range []string{"release", "forget"} {
			t.Run(strings.ReplaceAll(tt.name, " ", "_")+"/"+op, func(t *testing.T) {
				r := reservation(t, uniqueKey(t), fpA, now)
				mustReserve(t, s, r)
				f := finish(r, now, 2)
				f.ErrorCode, f.ErrorMessage, f.Retryable = tt.now.code, "as stored now", tt.now.retryable
				if err := s.Fail(context.Background(), f); err != nil {
					t.Fatalf("Fail: %v", err)
				}
				cur := mustGet(t, s, r.Key, now)
				read := cur
				read.ErrorCode, read.ErrorMessage, read.Retryable = tt.read.code, "as read", tt.read.retryable

				var (
					rec idem.Record
					ok  bool
					err error
				)
				if op == "release" {
					rel := release(t, now)
					rel.MayRepeatSideEffect = tt.consent
					rec, ok, err = s.Release(context.Background(), read, rel)
				} else {
					rec, ok, err = s.Forget(context.Background(), read, idem.Forget{Token: token(t), Now: now, Audit: "why", MayRepeatSideEffect: tt.consent})
				}
				if err != nil || ok {
					t.Fatalf("%s of %s (retryable %v) read as %s (retryable %v) = ok %v, err %v; want refused: %s",
						op, cur.ErrorCode, cur.Retryable, tt.read.code, tt.read.retryable, ok, err, tt.verdictNow)
				}
				if diff := cmp.Diff(cur, rec); diff != "" {
					t.Errorf("the refused %s returned (-want current +got):\n%s", op, diff)
				}
				if diff := cmp.Diff(cur, mustGet(t, s, r.Key, now)); diff != "" {
					t.Errorf("the refused %s changed the record (-before +after):\n%s", op, diff)
				}
			})
		}
	}
}

// Package storetest is the conformance suite of oncely's store contract
// (package driver): every behaviour the contract states, for Store,
// PoisonStore and EffectStore, is a named subtest of [Run], error
// classification included. A store that passes it keeps the engine's
// guarantees; a store's own test is one call:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			NewStore: func(t *testing.T) driver.Store { return mystore.New(...) },
//			Poison:   func(t *testing.T) driver.PoisonStore { return ... }, // if it keeps poison notes
//		})
//	}
//
// The suite uses unique keys, so one store (or one real table) may serve
// every subtest. Times sit on whole seconds, because stores may keep
// expiry in epoch seconds. The suite checks itself against deliberately
// broken stores: each rule it states fails one of them.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/driver"
)

const (
	fpA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	fpB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// Fault is a way the store's backend can fail, for the classification
// tests: the harness makes a store whose every call meets it.
type Fault string

// The faults, and the class each must give (see driver.Classify).
const (
	// Throttle: the backend throttles the call. Transient.
	Throttle Fault = "throttle"
	// ServerError: a 5xx. Transient.
	ServerError Fault = "server_error"
	// Unavailable: the backend is unavailable (503). Transient.
	Unavailable Fault = "unavailable"
	// Refuse: the connection is refused: nothing was sent. Transient.
	Refuse Fault = "refuse"
	// DropReply: the request was sent and its reply lost. Transient for a
	// read; outcome unknown for a write, which may have happened.
	DropReply Fault = "drop_reply"
	// MissingTable: the table (or its equivalent) does not exist.
	// Permanent, and the error names it.
	MissingTable Fault = "missing_table"
	// AccessDenied: the caller may not use it. Permanent, and the error
	// names it.
	AccessDenied Fault = "access_denied"
)

// Harness makes the stores the suite runs against. Only NewStore is
// required; each optional field declares a capability, checked when set.
type Harness struct {
	// NewStore returns a working store. It may return the same store to
	// every subtest: keys are unique.
	NewStore func(t *testing.T) driver.Store
	// NewFaulty returns a store whose every call meets fault f, and the
	// name of the resource it uses (a table), which its permanent errors
	// must name. Nil skips the classification tests: a store without I/O
	// (an in-memory one) has no faults to classify.
	NewFaulty func(t *testing.T, f Fault) (s driver.Store, resource string)
	// Poison returns the store's poison notes (driver.PoisonStore), if it
	// keeps them.
	Poison func(t *testing.T) driver.PoisonStore
	// Effects returns what the EffectStore tests need, if the store
	// commits an action's writes with its completion.
	Effects func(t *testing.T) EffectHarness
}

// Run runs every behaviour the contract states against the harness's
// stores: the Store's always, poison notes and effects when the harness
// declares them.
func Run(t *testing.T, h Harness) {
	if h.NewStore == nil {
		t.Fatal("storetest: Harness.NewStore is required")
	}
	t.Run("Store", func(t *testing.T) { runStoreTests(t, h) })
	if h.Poison != nil {
		t.Run("Poison", func(t *testing.T) { runPoisonTests(t, h.Poison(t)) })
	}
	if h.Effects != nil {
		t.Run("Effects", func(t *testing.T) { runEffectTests(t, h.Effects(t)) })
	}
}

// runStoreTests runs every behaviour a Store must have.
func runStoreTests(t *testing.T, h Harness) {
	newStore := h.NewStore
	tests := []struct {
		name string
		fn   func(t *testing.T, s driver.Store)
	}{
		{"ReserveFreshKey", testReserveFresh},
		{"DuplicateOfInProgressKey", testDuplicateInProgress},
		{"DuplicateOfSucceededKey", testDuplicateSucceeded},
		{"DuplicateOfFailedKey", testDuplicateFailed},
		{"KeyReusedWithOtherFingerprintNeverOverwrites", testKeyReused},
		{"ExpiredLeaseTakenOver", testExpiredLeaseTakenOver},
		{"RetryableFailureTakenOver", testRetryableFailureTakenOver},
		{"TakeOverIsCompareAndSwap", testTakeOverCAS},
		{"LiveLeaseCannotBeTakenOver", testLiveLeaseNotTakenOver},
		{"ExpiredRetentionCountsAsAbsent", testExpiredRetention},
		{"CompleteAndFailFencedByToken", testFenced},
		{"CompleteTwiceWithSameToken", testCompleteTwice},
		{"ConcurrentReserveHasOneWinner", testConcurrentReserve},
		{"ConcurrentTakeOverHasOneWinner", testConcurrentTakeOver},
		{"ResultsOfEveryShapeRoundTrip", testResultShapes},
		{"GetMissingKey", testGetMissing},
		{"RepeatedWriteWithOwnTokenIsOwned", testRepeatedOwnToken},
		{"OwnTokenOnAFinishedRecordIsNotOwnership", testOwnTokenFinished},
		{"ExpiredRecordIsNotTakenOver", testExpiredNotTakenOver},
		{"HoldOffRefusesReservationsUntilItEnds", testHoldOff},
		{"FailWithoutHoldOffStoresNone", testFailWithoutHoldOff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newStore(t))
		})
	}
	t.Run("ErrorsAreClassified", func(t *testing.T) {
		if h.NewFaulty == nil {
			t.Skip("the harness has no faulty store: nothing to classify")
		}
		testClassification(t, h.NewFaulty)
	})
}

// classes is what Classify must give for each fault, for reads and for
// writes: a write whose reply was lost may have happened.
var classes = []struct {
	kind          Fault
	read, write   driver.Class
	namesResource bool
}{
	{Throttle, driver.ClassTransient, driver.ClassTransient, false},
	{ServerError, driver.ClassTransient, driver.ClassTransient, false},
	{Unavailable, driver.ClassTransient, driver.ClassTransient, false},
	{Refuse, driver.ClassTransient, driver.ClassTransient, false},
	{DropReply, driver.ClassTransient, driver.ClassOutcomeUnknown, false},
	{MissingTable, driver.ClassPermanent, driver.ClassPermanent, true},
	{AccessDenied, driver.ClassPermanent, driver.ClassPermanent, true},
}

func testClassification(t *testing.T, newFaulty func(*testing.T, Fault) (driver.Store, string)) {
	for _, c := range classes {
		t.Run(string(c.kind), func(t *testing.T) {
			s, resource := newFaulty(t, c.kind)
			now := base()
			r := reservation(t, uniqueKey(t), fpA, now)
			f := finish(r, now, 1)
			calls := []struct {
				op    string
				class driver.Class
				call  func() error
			}{
				{"Reserve", c.write, func() error { _, _, err := s.Reserve(context.Background(), r); return err }},
				{"TakeOver", c.write, func() error {
					prev := driver.Record{Key: r.Key, Status: driver.StatusFailed, Retryable: true, Token: token(t), Attempts: 1, Fingerprint: fpA}
					_, _, err := s.TakeOver(context.Background(), prev, r)
					return err
				}},
				{"Complete", c.write, func() error { return s.Complete(context.Background(), f) }},
				{"Fail", c.write, func() error { return s.Fail(context.Background(), f) }},
				{"Get", c.read, func() error { _, _, err := s.Get(context.Background(), r.Key, now); return err }},
			}
			for _, call := range calls {
				err := call.call()
				if err == nil {
					t.Errorf("%s under %s: no error; want one", call.op, c.kind)
					continue
				}
				if got := driver.Classify(err); got != call.class {
					t.Errorf("%s under %s: class %v; want %v (%v)", call.op, c.kind, got, call.class, err)
				}
				if c.namesResource && !strings.Contains(err.Error(), resource) {
					t.Errorf("%s under %s: error %q does not name %q", call.op, c.kind, err, resource)
				}
			}
		})
	}
}

// base is a real epoch instant on a whole second: time arithmetic is tested
// with real values, never with a zero time.
func base() time.Time { return time.Now().Truncate(time.Second) }

func uniqueKey(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(name) > 90 {
		name = name[len(name)-90:]
	}
	return "evt:" + name + ":" + hex.EncodeToString(b[:])
}

func token(t *testing.T) string {
	t.Helper()
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func reservation(t *testing.T, key, fp string, now time.Time) driver.Reservation {
	return driver.Reservation{
		Key: key, Fingerprint: fp, Token: token(t), Now: now,
		LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour),
	}
}

func mustReserve(t *testing.T, s driver.Store, r driver.Reservation) driver.Record {
	t.Helper()
	rec, ok, err := s.Reserve(context.Background(), r)
	if err != nil || !ok {
		t.Fatalf("Reserve(%s) = acquired %v, err %v; want acquired", r.Key, ok, err)
	}
	return rec
}

func finish(r driver.Reservation, now time.Time, attempts int) driver.Finish {
	return driver.Finish{Key: r.Key, Token: r.Token, Now: now, Attempts: attempts, ExpiresAt: now.Add(time.Hour)}
}

func mustGet(t *testing.T, s driver.Store, key string, now time.Time) driver.Record {
	t.Helper()
	rec, ok, err := s.Get(context.Background(), key, now)
	if err != nil || !ok {
		t.Fatalf("Get(%s) = found %v, err %v; want found", key, ok, err)
	}
	return rec
}

func testReserveFresh(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	rec := mustReserve(t, s, r)
	want := driver.Record{
		Key: r.Key, Status: driver.StatusInProgress, Fingerprint: fpA, Attempts: 1, Token: r.Token,
		LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: now, UpdatedAt: now,
	}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("Reserve returned (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, mustGet(t, s, r.Key, now)); diff != "" {
		t.Errorf("Get after Reserve (-want +got):\n%s", diff)
	}
}

func testDuplicateInProgress(t *testing.T, s driver.Store) {
	now := base()
	first := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, first)
	second := reservation(t, first.Key, fpA, now.Add(time.Second))
	rec, ok, err := s.Reserve(context.Background(), second)
	if err != nil || ok {
		t.Fatalf("duplicate Reserve = acquired %v, err %v; want not acquired, nil", ok, err)
	}
	if rec.Status != driver.StatusInProgress || rec.Token != first.Token || rec.Attempts != 1 {
		t.Errorf("duplicate Reserve returned status %s token %s attempts %d; want IN_PROGRESS, the first token, 1", rec.Status, rec.Token, rec.Attempts)
	}
	if rec.Claimable(second.Now) {
		t.Errorf("a live lease is claimable")
	}
}

func testDuplicateSucceeded(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now.Add(time.Second), 1)
	f.Result = []byte(`{"status":202}`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec, ok, err := s.Reserve(context.Background(), reservation(t, r.Key, fpA, now.Add(2*time.Second)))
	if err != nil || ok {
		t.Fatalf("Reserve of succeeded key = acquired %v, err %v; want not acquired", ok, err)
	}
	if rec.Status != driver.StatusSucceeded || string(rec.Result) != `{"status":202}` || rec.Claimable(now.Add(time.Hour-time.Second)) {
		t.Errorf("got status %s result %q; want SUCCEEDED with the stored result, not claimable", rec.Status, rec.Result)
	}
	if !rec.ExpiresAt.Equal(f.ExpiresAt) || !rec.UpdatedAt.Equal(f.Now) {
		t.Errorf("got expires %v updated %v; want %v %v (retention restarts at completion)", rec.ExpiresAt, rec.UpdatedAt, f.ExpiresAt, f.Now)
	}
}

func testDuplicateFailed(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage = "HTTP_404", "downstream said 404"
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	rec, ok, err := s.Reserve(context.Background(), reservation(t, r.Key, fpA, now))
	if err != nil || ok {
		t.Fatalf("Reserve of failed key = acquired %v, err %v; want not acquired", ok, err)
	}
	want := driver.Record{Status: driver.StatusFailed, ErrorCode: "HTTP_404", ErrorMessage: "downstream said 404", Retryable: false, Attempts: 1}
	got := driver.Record{Status: rec.Status, ErrorCode: rec.ErrorCode, ErrorMessage: rec.ErrorMessage, Retryable: rec.Retryable, Attempts: rec.Attempts}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("failed record (-want +got):\n%s", diff)
	}
	if rec.Claimable(now) {
		t.Errorf("a permanent failure is claimable")
	}
}

func testKeyReused(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.Retryable = "TRANSIENT_FAILURE", true
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	other := reservation(t, r.Key, fpB, now)
	rec, ok, err := s.Reserve(context.Background(), other)
	if err != nil || ok || rec.Fingerprint != fpA {
		t.Fatalf("Reserve with other fingerprint = acquired %v, fp %s, err %v; want not acquired, original fp", ok, rec.Fingerprint, err)
	}
	// Even a claimable record is not taken over under another fingerprint.
	if _, ok, err := s.TakeOver(context.Background(), rec, other); err != nil || ok {
		t.Fatalf("TakeOver with other fingerprint = acquired %v, err %v; want refused", ok, err)
	}
	if got := mustGet(t, s, r.Key, now); got.Fingerprint != fpA || got.Token != r.Token {
		t.Errorf("record overwritten: fp %s token %s; want fp %s token %s", got.Fingerprint, got.Token, fpA, r.Token)
	}
}

func testExpiredLeaseTakenOver(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	mustReserve(t, s, r)
	later := now.Add(2 * time.Second)
	next := reservation(t, r.Key, fpA, later)
	prev, ok, err := s.Reserve(context.Background(), next)
	if err != nil || ok {
		t.Fatalf("Reserve over an ended lease = acquired %v, err %v; want not acquired (take-over is a separate CAS)", ok, err)
	}
	if !prev.Claimable(later) {
		t.Fatalf("record with lease %v is not claimable at %v", prev.LeaseUntil, later)
	}
	rec, ok, err := s.TakeOver(context.Background(), prev, next)
	if err != nil || !ok {
		t.Fatalf("TakeOver = acquired %v, err %v; want acquired", ok, err)
	}
	if rec.Attempts != 2 || rec.Token != next.Token || rec.Status != driver.StatusInProgress || !rec.LeaseUntil.Equal(next.LeaseUntil) {
		t.Errorf("after take-over: attempts %d token %s status %s lease %v; want 2, new token, IN_PROGRESS, %v", rec.Attempts, rec.Token, rec.Status, rec.LeaseUntil, next.LeaseUntil)
	}
	if !rec.CreatedAt.Equal(now) {
		t.Errorf("take-over changed created_at to %v; want %v", rec.CreatedAt, now)
	}
	// The crashed owner wakes up: its completion is fenced off.
	stale := finish(r, later, 1)
	stale.Result = []byte(`"stale"`)
	if err := s.Complete(context.Background(), stale); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("stale Complete = %v; want LEASE_LOST", err)
	}
	if got := mustGet(t, s, r.Key, later); got.Token != next.Token || got.Status != driver.StatusInProgress {
		t.Errorf("stale Complete overwrote the new owner's record: %+v", got)
	}
}

func testRetryableFailureTakenOver(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage, f.Retryable = "TRANSIENT_FAILURE", "503", true
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	next := reservation(t, r.Key, fpA, now)
	prev, ok, err := s.Reserve(context.Background(), next)
	if err != nil || ok || !prev.Claimable(now) {
		t.Fatalf("Reserve over retryable failure = acquired %v claimable %v err %v; want a claimable record", ok, prev.Claimable(now), err)
	}
	rec, ok, err := s.TakeOver(context.Background(), prev, next)
	if err != nil || !ok || rec.Attempts != 2 {
		t.Fatalf("TakeOver = acquired %v attempts %d err %v; want acquired with attempts 2", ok, rec.Attempts, err)
	}
	if rec.ErrorCode != "" || rec.Retryable {
		t.Errorf("take-over kept the old failure: code %q retryable %v", rec.ErrorCode, rec.Retryable)
	}
}

func testTakeOverCAS(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	mustReserve(t, s, r)
	later := now.Add(5 * time.Second)
	prev := mustGet(t, s, r.Key, later)
	// The owner completes between our read and our swap.
	f := finish(r, later, 1)
	f.Result = []byte(`1`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec, ok, err := s.TakeOver(context.Background(), prev, reservation(t, r.Key, fpA, later))
	if err != nil || ok {
		t.Fatalf("TakeOver of a record that changed = acquired %v, err %v; want refused", ok, err)
	}
	if rec.Status != driver.StatusSucceeded || string(rec.Result) != "1" {
		t.Errorf("refused TakeOver returned %s %q; want the current SUCCEEDED record", rec.Status, rec.Result)
	}

	// The record changed and is claimable again: a retryable failure taken
	// over by another worker, which failed retryably in turn. A take-over
	// judged on the first failure (a stale prev) must be refused, though
	// the claimable rule alone would let it through.
	r = reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	fail := finish(r, now, 1)
	fail.ErrorCode, fail.Retryable = driver.CodeTransientFailure, true
	if err := s.Fail(context.Background(), fail); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	stale := mustGet(t, s, r.Key, now)
	second := reservation(t, r.Key, fpA, now)
	if _, ok, err := s.TakeOver(context.Background(), stale, second); err != nil || !ok {
		t.Fatalf("TakeOver of the retryable failure = acquired %v, err %v", ok, err)
	}
	fail = finish(second, now, 2)
	fail.ErrorCode, fail.Retryable = driver.CodeTransientFailure, true
	if err := s.Fail(context.Background(), fail); err != nil {
		t.Fatalf("second Fail: %v", err)
	}
	third := reservation(t, r.Key, fpA, now)
	rec, ok, err = s.TakeOver(context.Background(), stale, third)
	if err != nil || ok {
		t.Fatalf("TakeOver with a stale prev (token %s, now %s) = acquired %v, err %v; want refused", stale.Token, second.Token, ok, err)
	}
	if rec.Token != second.Token || rec.Attempts != 2 {
		t.Errorf("refused TakeOver returned token %s attempts %d; want the current record (token %s, 2 attempts)", rec.Token, rec.Attempts, second.Token)
	}
}

func testLiveLeaseNotTakenOver(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	first := mustReserve(t, s, r)
	// Even with the right previous token, a live lease is not claimable.
	rec, ok, err := s.TakeOver(context.Background(), first, reservation(t, r.Key, fpA, now.Add(time.Second)))
	if err != nil || ok {
		t.Fatalf("TakeOver of a live lease = acquired %v, err %v; want refused", ok, err)
	}
	if rec.Token != r.Token {
		t.Errorf("refused TakeOver returned token %s; want the owner's %s", rec.Token, r.Token)
	}
}

func testExpiredRetention(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ExpiresAt = now.Add(10 * time.Second)
	f.Result = []byte(`"old"`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, ok, err := s.Get(context.Background(), r.Key, now.Add(9*time.Second)); err != nil || !ok {
		t.Fatalf("Get before expiry = found %v, err %v; want found", ok, err)
	}
	after := now.Add(10 * time.Second) // expires_at itself counts as expired
	if rec, ok, err := s.Get(context.Background(), r.Key, after); err != nil || ok {
		t.Fatalf("Get at expires_at = found %v (%+v), err %v; want absent", ok, rec, err)
	}
	next := reservation(t, r.Key, fpB, after)
	rec, ok, err := s.Reserve(context.Background(), next)
	if err != nil || !ok {
		t.Fatalf("Reserve after retention = acquired %v, err %v; want acquired", ok, err)
	}
	if rec.Attempts != 1 || rec.Fingerprint != fpB || rec.Result != nil {
		t.Errorf("fresh record after retention: attempts %d fp %s result %q; want 1, new fp, no result", rec.Attempts, rec.Fingerprint, rec.Result)
	}
}

func testFenced(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	wrong := finish(r, now, 1)
	wrong.Token = token(t)
	wrong.Result = []byte(`"intruder"`)
	if err := s.Complete(context.Background(), wrong); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Complete with a stale token = %v; want LEASE_LOST", err)
	}
	wrong.ErrorCode = "X"
	if err := s.Fail(context.Background(), wrong); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Fail with a stale token = %v; want LEASE_LOST", err)
	}
	missing := finish(reservation(t, uniqueKey(t), fpA, now), now, 1)
	if err := s.Complete(context.Background(), missing); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("Complete of a key never reserved = %v; want LEASE_LOST (and nothing created)", err)
	}
	if _, ok, _ := s.Get(context.Background(), missing.Key, now); ok {
		t.Errorf("Complete of a key never reserved created a record")
	}
	if got := mustGet(t, s, r.Key, now); got.Status != driver.StatusInProgress || got.Token != r.Token {
		t.Errorf("fenced writes changed the record: %+v", got)
	}
}

func testCompleteTwice(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 2)
	f.Result = []byte(`[1,2]`)
	for i := range 2 {
		if err := s.Complete(context.Background(), f); err != nil {
			t.Fatalf("Complete #%d: %v", i+1, err)
		}
	}
	if got := mustGet(t, s, r.Key, now); got.Status != driver.StatusSucceeded || string(got.Result) != "[1,2]" || got.Attempts != 2 {
		t.Errorf("after two Completes: %s %q attempts %d; want SUCCEEDED [1,2] 2", got.Status, got.Result, got.Attempts)
	}
}

func testConcurrentReserve(t *testing.T, s driver.Store) {
	const n = 64
	now := base()
	key := uniqueKey(t)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		seen    = map[string]int{}
	)
	start := make(chan struct{})
	for range n {
		r := reservation(t, key, fpA, now)
		wg.Go(func() {
			<-start
			rec, ok, err := s.Reserve(context.Background(), r)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("Reserve: %v", err)
			case ok:
				winners = append(winners, r.Token)
			default:
				seen[rec.Token]++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d goroutines reserving one key: %d winners; want exactly 1", n, len(winners))
	}
	if seen[winners[0]] != n-1 {
		t.Errorf("losers saw tokens %v; want all %d to see the winner's", seen, n-1)
	}
}

func testConcurrentTakeOver(t *testing.T, s driver.Store) {
	const n = 16
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	mustReserve(t, s, r)
	later := now.Add(3 * time.Second)
	prev := mustGet(t, s, r.Key, later)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    []driver.Reservation
		lost   []driver.Reservation
		start  = make(chan struct{})
		errsMu sync.Mutex
	)
	for range n {
		next := reservation(t, r.Key, fpA, later)
		wg.Go(func() {
			<-start
			_, ok, err := s.TakeOver(context.Background(), prev, next)
			if err != nil {
				errsMu.Lock()
				t.Errorf("TakeOver: %v", err)
				errsMu.Unlock()
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				won = append(won, next)
			} else {
				lost = append(lost, next)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d racing take-overs: %d winners; want exactly 1", n, len(won))
	}
	for _, l := range lost {
		f := finish(l, later, 2)
		f.Result = []byte(`"loser"`)
		if err := s.Complete(context.Background(), f); !errors.Is(err, driver.ErrLeaseLost) {
			t.Fatalf("loser's Complete = %v; want LEASE_LOST", err)
		}
	}
	f := finish(won[0], later, 2)
	f.Result = []byte(`"winner"`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatalf("winner's Complete: %v", err)
	}
	if got := mustGet(t, s, r.Key, later); string(got.Result) != `"winner"` || got.Attempts != 2 {
		t.Errorf("final record %q attempts %d; want \"winner\", 2", got.Result, got.Attempts)
	}
}

// ResultShapes returns, by name, the results a store must return byte for
// byte, falsy ones first: a store that drops 0, false, "", {}, [] or null
// makes the replay run the action again. Each call returns a fresh map.
func ResultShapes() map[string][]byte {
	return map[string][]byte{
		"zero":          []byte(`0`),
		"false":         []byte(`false`),
		"empty string":  []byte(`""`),
		"empty object":  []byte(`{}`),
		"empty array":   []byte(`[]`),
		"null":          []byte(`null`),
		"empty bytes":   {},
		"whitespace":    []byte(" {\"a\" : 1}\n"),
		"unicode":       []byte(`{"msg":"héllo \u2028 😀"}`),
		"big integer":   []byte(`12345678901234567891`),
		"not json":      {0x00, 0xff, 0xfe, 0x80},
		"large 100 KiB": []byte(`"` + strings.Repeat("x", 100*1024) + `"`),
	}
}

func testResultShapes(t *testing.T, s driver.Store) {
	for name, want := range ResultShapes() {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			now := base()
			r := reservation(t, uniqueKey(t), fpA, now)
			mustReserve(t, s, r)
			f := finish(r, now, 1)
			f.Result = want
			if err := s.Complete(context.Background(), f); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got := mustGet(t, s, r.Key, now)
			if got.Status != driver.StatusSucceeded || string(got.Result) != string(want) || got.Result == nil {
				t.Errorf("Get: status %s result %s; want SUCCEEDED %s (non-nil)", got.Status, show(got.Result), show(want))
			}
			dup, _, err := s.Reserve(context.Background(), reservation(t, r.Key, fpA, now))
			if err != nil || string(dup.Result) != string(want) || dup.Result == nil {
				t.Errorf("duplicate Reserve: result %s err %v; want %s", show(dup.Result), err, show(want))
			}
		})
	}
}

func show(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q…(%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func testGetMissing(t *testing.T, s driver.Store) {
	if rec, ok, err := s.Get(context.Background(), uniqueKey(t), base()); err != nil || ok {
		t.Errorf("Get of a missing key = %+v, found %v, err %v; want not found", rec, ok, err)
	}
}

// A write whose reply was lost is re-sent (by the SDK or the engine). The
// re-send finds the owner's own record and must report ownership, or the
// owner would wait out its own lease.
func testRepeatedOwnToken(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	rec, ok, err := s.Reserve(context.Background(), r)
	if err != nil || !ok || rec.Token != r.Token || rec.Attempts != 1 {
		t.Fatalf("repeated Reserve = acquired %v token %s attempts %d err %v; want owned, attempts 1", ok, rec.Token, rec.Attempts, err)
	}
	f := finish(r, now, 1)
	f.ErrorCode, f.Retryable = "TRANSIENT_FAILURE", true
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	prev := mustGet(t, s, r.Key, now)
	next := reservation(t, r.Key, fpA, now)
	if _, ok, err := s.TakeOver(context.Background(), prev, next); err != nil || !ok {
		t.Fatalf("TakeOver: acquired %v err %v", ok, err)
	}
	rec, ok, err = s.TakeOver(context.Background(), prev, next)
	if err != nil || !ok || rec.Attempts != 2 {
		t.Fatalf("repeated TakeOver = acquired %v attempts %d err %v; want owned, attempts still 2", ok, rec.Attempts, err)
	}
	// Another token's reservation is still refused.
	if _, ok, _ := s.Reserve(context.Background(), reservation(t, r.Key, fpA, now)); ok {
		t.Errorf("a different token acquired a live lease")
	}
}

func testOwnTokenFinished(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.Result = []byte(`"done"`)
	if err := s.Complete(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	// Ownership is an IN_PROGRESS record under our token, nothing else.
	rec, ok, err := s.Reserve(context.Background(), r)
	if err != nil || ok || rec.Status != driver.StatusSucceeded {
		t.Fatalf("Reserve with the token of a completed record = acquired %v status %s err %v; want not acquired, SUCCEEDED", ok, rec.Status, err)
	}
}

func testExpiredNotTakenOver(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil, r.ExpiresAt = now.Add(time.Second), now.Add(2*time.Second)
	prev := mustReserve(t, s, r)
	later := now.Add(3 * time.Second)
	rec, ok, err := s.TakeOver(context.Background(), prev, reservation(t, r.Key, fpA, later))
	if err != nil || ok || rec.Key != "" {
		t.Fatalf("TakeOver of an expired record = %+v, acquired %v, err %v; want a zero record, not acquired (Reserve admits it afresh)", rec, ok, err)
	}
}

// runPoisonTests checks a store's poison notes: stored with every field
// (the key too, when the note has one), stored again without error for a redelivered message, read back, and gone
// once expired.
func runPoisonTests(t *testing.T, p driver.PoisonStore) {
	now := base()
	note := driver.Poison{ID: "msg-" + token(t), Reason: "NOT_JSON", Detail: "the body is not JSON: syntax error at byte 1",
		BodySHA256: fpA, BodySize: 17, At: now, ExpiresAt: now.Add(time.Hour)}
	// A key reused with another payload: the note names the key.
	reused := driver.Poison{ID: "msg-" + token(t), Key: uniqueKey(t), Reason: driver.CodeKeyReused, Detail: "the key is already used with a different payload",
		BodySHA256: fpB, BodySize: 40, At: now, ExpiresAt: now.Add(time.Hour)}
	for _, n := range []driver.Poison{note, reused} {
		for i := range 2 {
			if err := p.RecordPoison(context.Background(), n); err != nil {
				t.Fatalf("RecordPoison #%d: %v", i+1, err)
			}
		}
		got, ok, err := p.GetPoison(context.Background(), n.ID, now)
		if err != nil || !ok {
			t.Fatalf("GetPoison = found %v, err %v; want the note", ok, err)
		}
		if diff := cmp.Diff(n, got); diff != "" {
			t.Errorf("note read back (-want +got):\n%s", diff)
		}
	}
	if _, ok, err := p.GetPoison(context.Background(), "msg-"+token(t), now); err != nil || ok {
		t.Errorf("GetPoison of an unknown id = found %v, err %v; want not found", ok, err)
	}
	if _, ok, err := p.GetPoison(context.Background(), note.ID, note.ExpiresAt); err != nil || ok {
		t.Errorf("GetPoison at its expiry = found %v, err %v; want not found", ok, err)
	}
}

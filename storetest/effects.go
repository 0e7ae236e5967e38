package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely/driver"
)

// EffectHarness makes what the EffectStore tests need from a store that
// commits effects (driver.EffectStore). Effects are in the store's own terms, so the
// harness builds them.
type EffectHarness struct {
	Store driver.EffectStore
	// Write returns effects that create the item named name, on the
	// condition that it does not exist yet.
	Write func(t *testing.T, name string) driver.Effects
	// Exists reports whether the item named name was written.
	Exists func(t *testing.T, name string) bool
	// Conflict returns effects that write the item named name and then a
	// second item whose condition fails: neither may be applied.
	Conflict func(t *testing.T, name string) driver.Effects
	// TooMany returns more effects than one commit can hold, writing items
	// named after prefix.
	TooMany func(t *testing.T, prefix string) driver.Effects
	// Twice returns effects that write the item named name twice.
	Twice func(t *testing.T, name string) driver.Effects
}

// runEffectTests checks the EffectStore contract.
func runEffectTests(t *testing.T, h EffectHarness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h EffectHarness)
	}{
		{"CommitAppliesRecordAndEffectsTogether", testEffectsCommit},
		{"StaleOwnerAppliesNothing", testEffectsFenced},
		{"FinishedRecordAppliesNothing", testEffectsOnlyFromInProgress},
		{"FailedConditionAppliesNothing", testEffectsConflict},
		{"InvalidEffectsRefusedBeforeSending", testEffectsInvalid},
		{"RepeatAfterUnknownOutcomeIsSuccess", testEffectsRepeat},
		{"CrashBeforeCommitLeavesNothing", testEffectsCrash},
		{"RacingOwnersCommitOnce", testEffectsRace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

func code(err error) driver.Code {
	var ce *driver.ClassifiedError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

func testEffectsCommit(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, h.Store, r)
	f := finish(r, now, 1)
	f.Result = []byte(`{"entry":1}`)
	name := uniqueKey(t)
	if err := h.Store.CompleteWithEffects(context.Background(), f, h.Write(t, name)); err != nil {
		t.Fatalf("CompleteWithEffects: %v", err)
	}
	if !h.Exists(t, name) {
		t.Errorf("the effect was not applied")
	}
	if rec := mustGet(t, h.Store, r.Key, now); rec.Status != driver.StatusSucceeded || string(rec.Result) != `{"entry":1}` {
		t.Errorf("record %s %q; want SUCCEEDED with the result", rec.Status, rec.Result)
	}
}

func testEffectsFenced(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	prev := mustReserve(t, h.Store, r)
	later := now.Add(2 * time.Second)
	next := reservation(t, r.Key, fpA, later)
	if _, ok, err := h.Store.TakeOver(context.Background(), prev, next); err != nil || !ok {
		t.Fatalf("TakeOver: %v %v", ok, err)
	}
	name := uniqueKey(t)
	err := h.Store.CompleteWithEffects(context.Background(), finish(r, later, 1), h.Write(t, name))
	if !errors.Is(err, driver.ErrLeaseLost) {
		t.Fatalf("the stale owner's commit = %v; want LEASE_LOST", err)
	}
	if h.Exists(t, name) {
		t.Errorf("the stale owner's effect was applied")
	}
	if rec := mustGet(t, h.Store, r.Key, later); rec.Token != next.Token || rec.Status != driver.StatusInProgress {
		t.Errorf("record %+v; want the new owner's, untouched", rec)
	}
}

func testEffectsOnlyFromInProgress(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, h.Store, r)
	f := finish(r, now, 1)
	f.ErrorCode = "HTTP_404"
	if err := h.Store.Fail(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	name := uniqueKey(t)
	if err := h.Store.CompleteWithEffects(context.Background(), finish(r, now, 1), h.Write(t, name)); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("commit on a FAILED record = %v; want LEASE_LOST", err)
	}
	if h.Exists(t, name) {
		t.Errorf("an effect was applied to a record that is not IN_PROGRESS")
	}
}

func testEffectsConflict(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, h.Store, r)
	name := uniqueKey(t)
	err := h.Store.CompleteWithEffects(context.Background(), finish(r, now, 1), h.Conflict(t, name))
	if code(err) != driver.CodeEffectConditionFailed || driver.Classify(err) != driver.ClassPermanent {
		t.Fatalf("commit with a failing condition = %v; want permanent %s", err, driver.CodeEffectConditionFailed)
	}
	if h.Exists(t, name) {
		t.Errorf("a write of a cancelled commit was applied")
	}
	if rec := mustGet(t, h.Store, r.Key, now); rec.Status != driver.StatusInProgress {
		t.Errorf("record %s; want still IN_PROGRESS (the engine records the failure)", rec.Status)
	}
}

func testEffectsInvalid(t *testing.T, h EffectHarness) {
	for what, effects := range map[string]func(*testing.T, string) driver.Effects{"too many": h.TooMany, "one item twice": h.Twice} {
		now := base()
		r := reservation(t, uniqueKey(t), fpA, now)
		mustReserve(t, h.Store, r)
		name := uniqueKey(t)
		err := h.Store.CompleteWithEffects(context.Background(), finish(r, now, 1), effects(t, name))
		if code(err) != driver.CodeInvalidEffects || driver.Classify(err) != driver.ClassPermanent || err.Error() == "" {
			t.Errorf("%s: %v; want permanent %s with a message", what, err, driver.CodeInvalidEffects)
		}
		if rec := mustGet(t, h.Store, r.Key, now); rec.Status != driver.StatusInProgress {
			t.Errorf("%s: record %s; want untouched", what, rec.Status)
		}
	}
}

// The engine repeats a commit whose reply was lost. The repeat must report
// the first one's success, and apply nothing twice.
func testEffectsRepeat(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, h.Store, r)
	f := finish(r, now, 1)
	f.Result = []byte(`1`)
	name := uniqueKey(t)
	effects := h.Write(t, name)
	for i := range 2 {
		if err := h.Store.CompleteWithEffects(context.Background(), f, effects); err != nil {
			t.Fatalf("commit #%d: %v; want success (a repeat of a committed call is not a failure)", i+1, err)
		}
	}
	if rec := mustGet(t, h.Store, r.Key, now); rec.Status != driver.StatusSucceeded || !h.Exists(t, name) {
		t.Errorf("record %s, effect applied %v; want SUCCEEDED and applied", rec.Status, h.Exists(t, name))
	}
}

// A worker that crashed between "action returned" and "commit" committed
// nothing; the owner that takes over commits once.
func testEffectsCrash(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	prev := mustReserve(t, h.Store, r)
	name := uniqueKey(t)
	_ = h.Write(t, name) // the crashed worker's effects: built, never committed
	later := now.Add(2 * time.Second)
	next := reservation(t, r.Key, fpA, later)
	if _, ok, err := h.Store.TakeOver(context.Background(), prev, next); err != nil || !ok {
		t.Fatalf("TakeOver: %v %v", ok, err)
	}
	if err := h.Store.CompleteWithEffects(context.Background(), finish(next, later, 2), h.Write(t, name)); err != nil {
		t.Fatalf("the new owner's commit: %v", err)
	}
	if !h.Exists(t, name) {
		t.Errorf("the new owner's effect was not applied")
	}
}

// Two owners (a late one and the one that took over) commit at once: only
// the current owner's commit applies.
func testEffectsRace(t *testing.T, h EffectHarness) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	r.LeaseUntil = now.Add(time.Second)
	prev := mustReserve(t, h.Store, r)
	later := now.Add(2 * time.Second)
	next := reservation(t, r.Key, fpA, later)
	if _, ok, err := h.Store.TakeOver(context.Background(), prev, next); err != nil || !ok {
		t.Fatalf("TakeOver: %v %v", ok, err)
	}
	late, current := uniqueKey(t), uniqueKey(t)
	var wg sync.WaitGroup
	var lateErr, currentErr error
	wg.Go(func() {
		lateErr = h.Store.CompleteWithEffects(context.Background(), finish(r, later, 1), h.Write(t, late))
	})
	wg.Go(func() {
		currentErr = h.Store.CompleteWithEffects(context.Background(), finish(next, later, 2), h.Write(t, current))
	})
	wg.Wait()
	if !errors.Is(lateErr, driver.ErrLeaseLost) || currentErr != nil {
		t.Fatalf("late owner %v, current owner %v; want LEASE_LOST and success", lateErr, currentErr)
	}
	if h.Exists(t, late) || !h.Exists(t, current) {
		t.Errorf("late owner's effect applied %v, current owner's %v; want false, true", h.Exists(t, late), h.Exists(t, current))
	}
}

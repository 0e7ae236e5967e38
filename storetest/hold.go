package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/oncely/oncely/driver"
)

// heldFailure stores a retryable failure of a fresh key held off until
// now+hold, as the engine's release after a sent request does, and returns
// its reservation and the record as read back at now.
func heldFailure(t *testing.T, s driver.Store, now time.Time, hold time.Duration) (driver.Reservation, driver.Record) {
	t.Helper()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage, f.Retryable = driver.CodeTransientFailure, "timed out once written", true
	f.HoldUntil = now.Add(hold)
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail with a hold-off: %v", err)
	}
	return r, mustGet(t, s, r.Key, now)
}

// testHoldOff: a retryable failure held off is stored with its hold-off,
// and no reservation or take-over acquires the key before it ends, whatever
// the caller read; at its end a take-over succeeds and drops it.
func testHoldOff(t *testing.T, s driver.Store) {
	ctx := context.Background()
	now := base()
	r, held := heldFailure(t, s, now, 10*time.Second)
	if !held.HoldUntil.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("stored HoldUntil %v; want %v", held.HoldUntil, now.Add(10*time.Second))
	}
	if held.Claimable(now.Add(5 * time.Second)) {
		t.Errorf("a record held off for 10 s is claimable 5 s in")
	}

	during := now.Add(5 * time.Second)
	if rec, ok, err := s.Reserve(ctx, reservation(t, r.Key, fpA, during)); err != nil || ok || !rec.HoldUntil.Equal(held.HoldUntil) {
		t.Fatalf("Reserve during the hold-off = acquired %v, hold %v, err %v; want refused with the held record", ok, rec.HoldUntil, err)
	}
	rec, ok, err := s.TakeOver(ctx, held, reservation(t, r.Key, fpA, during))
	if err != nil || ok {
		t.Fatalf("TakeOver during the hold-off = acquired %v, err %v; want refused", ok, err)
	}
	if rec.Token != r.Token || rec.Status != driver.StatusFailed {
		t.Errorf("refused TakeOver returned %s under %s; want the held FAILED record under %s", rec.Status, rec.Token, r.Token)
	}
	// The store judges the stored hold-off, not the caller's copy: a
	// caller that read the record without it (or ignores it) is refused too.
	blind := held
	blind.HoldUntil = time.Time{}
	if _, ok, err := s.TakeOver(ctx, blind, reservation(t, r.Key, fpA, during)); err != nil || ok {
		t.Fatalf("TakeOver during the hold-off by a caller blind to it = acquired %v, err %v; want refused", ok, err)
	}

	end := now.Add(10 * time.Second) // a hold-off that ends exactly now has ended
	next := reservation(t, r.Key, fpA, end)
	got, ok, err := s.TakeOver(ctx, held, next)
	if err != nil || !ok || got.Attempts != 2 {
		t.Fatalf("TakeOver once the hold-off ended = acquired %v, attempts %d, err %v; want acquired at attempt 2", ok, got.Attempts, err)
	}
	if cur := mustGet(t, s, r.Key, end); !cur.HoldUntil.IsZero() || cur.Token != next.Token {
		t.Errorf("after the take-over the record has hold %v under %s; want no hold-off under %s", cur.HoldUntil, cur.Token, next.Token)
	}
}

// testFailWithoutHoldOff: a failure written without a hold-off stores none
// (records of older writers), and a completion drops none it could carry.
func testFailWithoutHoldOff(t *testing.T, s driver.Store) {
	now := base()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.Retryable = driver.CodeTransientFailure, true
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail: %v", err)
	}
	if rec := mustGet(t, s, r.Key, now); !rec.HoldUntil.IsZero() || !rec.Claimable(now) {
		t.Errorf("a failure without a hold-off reads back with hold %v, claimable %v; want none, claimable at once", rec.HoldUntil, rec.Claimable(now))
	}
}

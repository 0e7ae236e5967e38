package storetest

import (
	"context"
	"testing"
	"time"
)

// testReleaseClearsHoldOff: an operator's release of a held-off record ends
// the hold-off at once; the next delivery takes the key over.
func testReleaseClearsHoldOff(t *testing.T, s OperatorStore) {
	ctx := context.Background()
	now := base()
	held := heldFailure(t, s, now, time.Minute)
	rel := release(t, now.Add(time.Second))
	rec, ok, err := s.Release(ctx, held, rel)
	if err != nil || !ok {
		t.Fatalf("Release of a held-off record = ok %v, err %v; want released", ok, err)
	}
	if !rec.HoldUntil.IsZero() {
		t.Errorf("Release returned hold %v; want none", rec.HoldUntil)
	}
	if cur := mustGet(t, s, held.Key, rel.Now); !cur.HoldUntil.IsZero() {
		t.Errorf("Get after Release: hold %v; want none", cur.HoldUntil)
	}
	next := reservation(t, held.Key, fpA, rel.Now)
	if got, ok, err := s.TakeOver(ctx, rec, next); err != nil || !ok || got.Attempts != 1 {
		t.Fatalf("TakeOver after the release, within the old hold-off = acquired %v, attempts %d, err %v; want acquired at attempt 1", ok, got.Attempts, err)
	}
}

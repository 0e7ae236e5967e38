package oncelytest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/storetest"
)

// The store a user's tests get is held to the same contract as every other.
func TestStorePassesTheConformanceSuite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		NewStore: func(*testing.T) driver.Store { return oncelytest.NewStore() },
		Poison:   func(*testing.T) driver.PoisonStore { return oncelytest.NewStore() },
	})
}

func TestClockReadsWhatItWasSetTo(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := oncelytest.NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v; want %v", got, start)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), start.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("after Advance(90s): %v; want %v", got, want)
	}
	later := start.Add(48 * time.Hour)
	c.Set(later)
	if got := c.Now(); !got.Equal(later) {
		t.Errorf("after Set: %v; want %v", got, later)
	}
}

// Many goroutines move and read the clock at once (run with -race): no
// step is lost.
func TestClockIsSafeForConcurrentUse(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := oncelytest.NewClock(start)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 20 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(1000*time.Millisecond); !got.Equal(want) {
		t.Errorf("after 1,000 steps of 1 ms: %v; want %v", got, want)
	}
}

// The clock decides when a crashed owner's lease has ended: before Advance
// a second call is refused IN_PROGRESS, after it the key is taken over.
func TestClockEndsACrashedOwnersLease(t *testing.T) {
	clock := oncelytest.NewClock(time.Now())
	store := oncelytest.NewStore()
	e, err := oncely.New(store, oncely.Options{Lease: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const key = "order:2001:charge"
	crashedOwner(t, store, clock, key, 7, time.Minute)

	runs := 0
	charge := func(context.Context) (string, error) { runs++; return "charged", nil }
	if _, err := oncely.Do(context.Background(), e, key, 7, charge); !errors.Is(err, oncely.ErrInProgress) || runs != 0 {
		t.Fatalf("within the lease: %v, %d runs; want IN_PROGRESS and no run", err, runs)
	}
	clock.Advance(time.Minute)
	got, err := oncely.Do(context.Background(), e, key, 7, charge)
	if err != nil || got != "charged" || runs != 1 {
		t.Fatalf("after the lease: %q, %v, %d runs; want one run that took the key over", got, err, runs)
	}
	rec, _, _ := store.Get(context.Background(), key, clock.Now())
	if rec.Attempts != 2 || rec.Status != oncely.StatusSucceeded {
		t.Errorf("record %s after %d attempts; want SUCCEEDED after 2 (the crashed one counts)", rec.Status, rec.Attempts)
	}
}

// The clock also ends retention: a record past it counts as absent and the
// key runs again.
func TestClockEndsRetention(t *testing.T) {
	clock := oncelytest.NewClock(time.Now())
	e, err := oncely.New(oncelytest.NewStore(), oncely.Options{Retention: time.Hour, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	for _, step := range []time.Duration{0, 59 * time.Minute, time.Minute} {
		clock.Advance(step)
		if _, err := oncely.Do(context.Background(), e, "order:2002:charge", 1, fn); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Errorf("%d runs; want 2 (a replay within the hour, a new run once it ended)", runs)
	}
}

// crashedOwner reserves key as a process that died right after would have
// left it: IN_PROGRESS with a lease that ends after lease.
func crashedOwner(t *testing.T, s driver.Store, clock *oncelytest.Clock, key string, payload int, lease time.Duration) {
	t.Helper()
	req, err := oncely.NewRequest(key, []byte{byte('0' + payload)})
	if err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	_, ok, err := s.Reserve(context.Background(), driver.Reservation{
		Key: key, Fingerprint: req.Fingerprint, Token: "crashed-owner", Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(24 * time.Hour),
	})
	if err != nil || !ok {
		t.Fatalf("Reserve: %v, %v", ok, err)
	}
}

package oncelytest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/oncelytest"
)

// An engine for a test: the in-memory store and a clock the test moves.
func ExampleNewStore() {
	store := oncelytest.NewStore()
	engine, err := oncely.New(store, oncely.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	send := func(context.Context) (string, error) { return "sent", nil }
	for range 2 {
		got, err := oncely.Do(ctx, engine, "welcome-mail:user-42", "user-42", send)
		fmt.Println(got, err)
	}
	rec, _, _ := store.Get(ctx, "welcome-mail:user-42", time.Now())
	fmt.Println(rec.Status, rec.Attempts, string(rec.Result))
	// Output:
	// sent <nil>
	// sent <nil>
	// SUCCEEDED 1 "sent"
}

// A process reserved a key and died. Its lease keeps the key until it
// ends; the test moves the clock past it instead of waiting.
func ExampleClock() {
	clock := oncelytest.NewClock(time.Now())
	store := oncelytest.NewStore()
	engine, err := oncely.New(store, oncely.Options{Lease: time.Minute, Now: clock.Now})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	key := "invoice:7731:send"

	// The crashed owner's reservation, as the engine would have written it.
	req, _ := oncely.NewRequest(key, []byte(`"inv-7731"`))
	now := clock.Now()
	store.Reserve(ctx, driver.Reservation{Key: key, Fingerprint: req.Fingerprint, Token: "crashed",
		Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})

	send := func(context.Context) (string, error) { return "sent", nil }
	_, err = oncely.Do(ctx, engine, key, "inv-7731", send)
	fmt.Println("within the lease:", errors.Is(err, oncely.ErrInProgress))

	clock.Advance(time.Minute)
	got, err := oncely.Do(ctx, engine, key, "inv-7731", send)
	fmt.Println("after it:", got, err)
	// Output:
	// within the lease: true
	// after it: sent <nil>
}

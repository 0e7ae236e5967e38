// Package oncelytest helps test code that uses oncely: an in-memory store
// ([NewStore]) and a clock the test moves by hand ([NewClock]).
//
// It is for tests only, never for a deployed function: the store lives in
// one process's memory, so two instances of a function never see each
// other's records (both would run the same event), and every record is
// lost on a restart (a redelivery after it runs again). Deploy a store
// that keeps its records in a shared database (the project's DynamoDB
// store, or your own that passes storetest.Run).
//
//	clock := oncelytest.NewClock(time.Now())
//	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Now: clock.Now})
package oncelytest

import (
	"context"
	"sync"
	"time"

	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// Store is an in-memory store: a driver.Store and a driver.PoisonStore,
// safe for concurrent use within one process. It passes the store
// conformance suite. The zero value is not usable; call NewStore.
type Store struct {
	s *memstore.Store
}

// Interface checks: what a test passes to oncely.New and to the adapters.
var (
	_ driver.Store       = (*Store)(nil)
	_ driver.PoisonStore = (*Store)(nil)
)

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{s: memstore.New()} }

// Reserve implements driver.Store.
func (s *Store) Reserve(ctx context.Context, r driver.Reservation) (driver.Record, bool, error) {
	return s.s.Reserve(ctx, r)
}

// TakeOver implements driver.Store.
func (s *Store) TakeOver(ctx context.Context, prev driver.Record, r driver.Reservation) (driver.Record, bool, error) {
	return s.s.TakeOver(ctx, prev, r)
}

// Complete implements driver.Store.
func (s *Store) Complete(ctx context.Context, f driver.Finish) error { return s.s.Complete(ctx, f) }

// Fail implements driver.Store.
func (s *Store) Fail(ctx context.Context, f driver.Finish) error { return s.s.Fail(ctx, f) }

// Get implements driver.Store: what a test reads to see what the engine
// stored for a key.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, bool, error) {
	return s.s.Get(ctx, key, now)
}

// RecordPoison implements driver.PoisonRecorder.
func (s *Store) RecordPoison(ctx context.Context, p driver.Poison) error {
	return s.s.RecordPoison(ctx, p)
}

// GetPoison implements driver.PoisonStore.
func (s *Store) GetPoison(ctx context.Context, id string, now time.Time) (driver.Poison, bool, error) {
	return s.s.GetPoison(ctx, id, now)
}

// Clock is a clock that moves only when the test moves it, for
// oncely.Options.Now: pass clock.Now. It is safe for concurrent use. The
// zero value is not usable; call NewClock.
//
// The clock decides what the engine stamps on records and when a lease, a
// hold-off or a retention has ended. The engine's waits (backoff between
// retries, the abandon grace) are real time, and it derives the action's
// context deadline from the clock's reading: start the clock at
// time.Now() and move it forward, since a clock set in the past hands the
// action a context that has already ended.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (back, if d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

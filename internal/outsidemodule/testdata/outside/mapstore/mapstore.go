// Package mapstore is a store written outside oncely's module, as a team
// would write one for its own database: a map and a mutex, implementing
// driver.Store, driver.EffectStore and driver.PoisonStore. Its effects are
// conditional writes of named items into the same map, committed with the
// record under the same lock.
package mapstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oncely/oncely/driver"
)

// MaxWrites is how many writes one commit can hold.
const MaxWrites = 10

// Cond is a write's condition on its item.
type Cond int

const (
	IfAbsent Cond = iota // the item does not exist yet
	IfExists             // the item exists
)

// Put writes one item, on its condition.
type Put struct {
	Item  string
	Value string
	If    Cond
}

// Writes are this store's effects.
type Writes []Put

// Len implements driver.Effects.
func (w Writes) Len() int { return len(w) }

// Store is safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	records map[string]driver.Record
	items   map[string]string
	notes   map[string]driver.Poison
}

var (
	_ driver.EffectStore = (*Store)(nil)
	_ driver.PoisonStore = (*Store)(nil)
)

func New() *Store {
	return &Store{records: map[string]driver.Record{}, items: map[string]string{}, notes: map[string]driver.Poison{}}
}

// live returns key's record unless it is absent or expired at now.
func (s *Store) live(key string, now time.Time) (driver.Record, bool) {
	rec, ok := s.records[key]
	if !ok || rec.Expired(now) {
		return driver.Record{}, false
	}
	return rec, true
}

func ownedBy(rec driver.Record, token string) bool {
	return rec.Token == token && rec.Status == driver.StatusInProgress
}

func copyRecord(r driver.Record) driver.Record {
	r.Result = slices.Clone(r.Result)
	return r
}

func (s *Store) Reserve(_ context.Context, r driver.Reservation) (driver.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.live(r.Key, r.Now); ok {
		return copyRecord(rec), ownedBy(rec, r.Token), nil
	}
	rec := driver.Record{Key: r.Key, Status: driver.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: 1, Token: r.Token,
		LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: r.Now, UpdatedAt: r.Now}
	s.records[r.Key] = rec
	return copyRecord(rec), true, nil
}

func (s *Store) TakeOver(_ context.Context, prev driver.Record, r driver.Reservation) (driver.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.live(r.Key, r.Now)
	switch {
	case !ok:
		return driver.Record{}, false, nil
	case ownedBy(rec, r.Token):
		return copyRecord(rec), true, nil
	case rec.Token != prev.Token || rec.Status != prev.Status || rec.Attempts != prev.Attempts ||
		rec.Fingerprint != r.Fingerprint || !rec.Claimable(r.Now):
		return copyRecord(rec), false, nil
	}
	next := driver.Record{Key: r.Key, Status: driver.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: rec.Attempts + 1,
		Token: r.Token, LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: rec.CreatedAt, UpdatedAt: r.Now, Audit: rec.Audit}
	s.records[r.Key] = next
	return copyRecord(next), true, nil
}

// finish applies f to its record if f's token still owns it.
func (s *Store) finish(f driver.Finish, status driver.Status) error {
	rec, ok := s.records[f.Key]
	if !ok || rec.Token != f.Token {
		return driver.ErrLeaseLost
	}
	rec.Status, rec.Attempts, rec.ExpiresAt, rec.UpdatedAt = status, f.Attempts, f.ExpiresAt, f.Now
	rec.Result, rec.ErrorCode, rec.ErrorMessage, rec.Retryable, rec.HoldUntil = nil, "", "", false, time.Time{}
	if status == driver.StatusSucceeded {
		rec.Result = append([]byte{}, f.Result...)
	} else {
		rec.ErrorCode, rec.ErrorMessage, rec.Retryable, rec.HoldUntil = f.ErrorCode, f.ErrorMessage, f.Retryable, f.HoldUntil
	}
	s.records[f.Key] = rec
	return nil
}

func (s *Store) Complete(_ context.Context, f driver.Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finish(f, driver.StatusSucceeded)
}

func (s *Store) Fail(_ context.Context, f driver.Finish) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finish(f, driver.StatusFailed)
}

// CompleteWithEffects commits the completion and the writes under one lock:
// both or neither.
func (s *Store) CompleteWithEffects(_ context.Context, f driver.Finish, effects driver.Effects) error {
	writes, ok := effects.(Writes)
	if !ok {
		return driver.PermanentCode(driver.CodeInvalidEffects, fmt.Errorf("mapstore: effects of type %T; want mapstore.Writes", effects))
	}
	if len(writes) > MaxWrites {
		return driver.PermanentCode(driver.CodeInvalidEffects, fmt.Errorf("mapstore: %d writes; one commit holds at most %d", len(writes), MaxWrites))
	}
	seen := map[string]bool{}
	for _, w := range writes {
		if seen[w.Item] {
			return driver.PermanentCode(driver.CodeInvalidEffects, fmt.Errorf("mapstore: item %q is written twice", w.Item))
		}
		seen[w.Item] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[f.Key]
	if ok && rec.Token == f.Token && rec.Status == driver.StatusSucceeded {
		return nil // a repeat of a commit that landed
	}
	if !ok || !ownedBy(rec, f.Token) {
		return driver.ErrLeaseLost
	}
	for _, w := range writes {
		if _, exists := s.items[w.Item]; exists != (w.If == IfExists) {
			return driver.PermanentCode(driver.CodeEffectConditionFailed, fmt.Errorf("mapstore: the condition on item %q failed", w.Item))
		}
	}
	for _, w := range writes {
		s.items[w.Item] = w.Value
	}
	return s.finish(f, driver.StatusSucceeded)
}

func (s *Store) Get(_ context.Context, key string, now time.Time) (driver.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.live(key, now)
	return copyRecord(rec), ok, nil
}

// Item returns an item an effect wrote.
func (s *Store) Item(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.items[name]
	return v, ok
}

func (s *Store) RecordPoison(_ context.Context, p driver.Poison) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes[p.ID] = p
	return nil
}

func (s *Store) GetPoison(_ context.Context, id string, now time.Time) (driver.Poison, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.notes[id]
	if !ok || !now.Before(p.ExpiresAt) {
		return driver.Poison{}, false, nil
	}
	return p, true, nil
}

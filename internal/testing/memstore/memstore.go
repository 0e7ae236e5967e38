// Package memstore is an in-memory idem.Store for tests and demos: single
// process, lost on restart. It gives no protection across processes and
// must not back a deployed function.
package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// Store is an in-memory idem.Store. It is safe for concurrent use. The zero
// value is not usable; call New.
type Store struct {
	mu      sync.Mutex
	records map[string]idem.Record
	poison  map[string]idem.Poison
	// forgotten holds, per key, the token of the last forget, so that its
	// re-send is recognised (ddbstore keeps it in the forget note).
	forgotten map[string]string
}

// New returns an empty Store.
func New() *Store {
	return &Store{records: map[string]idem.Record{}, poison: map[string]idem.Poison{}, forgotten: map[string]string{}}
}

// Reserve implements idem.Store.
func (s *Store) Reserve(_ context.Context, r idem.Reservation) (idem.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[r.Key]; ok && !old.Expired(r.Now) {
		// A repeated request with the owner's own token is the owner.
		owned := old.Token == r.Token && old.Status == idem.StatusInProgress
		return clone(old), owned, nil
	}
	rec := idem.Record{
		Key: r.Key, Status: idem.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: 1,
		Token: r.Token, LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: r.Now, UpdatedAt: r.Now,
	}
	s.records[r.Key] = rec
	return clone(rec), true, nil
}

// TakeOver implements idem.Store.
func (s *Store) TakeOver(_ context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.records[r.Key]
	if !ok || old.Expired(r.Now) {
		return idem.Record{}, false, nil
	}
	if old.Token == r.Token && old.Status == idem.StatusInProgress {
		return clone(old), true, nil // a repeated take-over that already landed
	}
	// Compare-and-swap: the record must still be the one the engine judged.
	if old.Token != prev.Token || old.Status != prev.Status || old.Attempts != prev.Attempts || old.Fingerprint != r.Fingerprint || !old.Claimable(r.Now) {
		return clone(old), false, nil
	}
	rec := idem.Record{
		Key: r.Key, Status: idem.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: old.Attempts + 1,
		Token: r.Token, LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: old.CreatedAt, UpdatedAt: r.Now,
		Audit: old.Audit,
	}
	s.records[r.Key] = rec
	return clone(rec), true, nil
}

// Release implements idem.Operator.
func (s *Store) Release(_ context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	if len(r.Audit) > idem.MaxAudit {
		return idem.Record{}, false, idem.Permanent(fmt.Errorf("memstore: audit is %d bytes; at most %d", len(r.Audit), idem.MaxAudit))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.swappable(prev, r.Now)
	if !ok && idem.ReleasedBy(old, r.Token) {
		return clone(old), true, nil // a re-send of a release that landed
	}
	if !ok || idem.Releasable(old, r) != nil {
		return clone(old), false, nil
	}
	rec := idem.Released(old, r)
	s.records[prev.Key] = rec
	return clone(rec), true, nil
}

// Forget implements idem.Operator.
func (s *Store) Forget(_ context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.swappable(prev, f.Now)
	if !ok && f.Token != "" && s.forgotten[prev.Key] == f.Token {
		return clone(prev), true, nil // a re-send of a forget that happened
	}
	if !ok || idem.Forgettable(old, f) != nil {
		return clone(old), false, nil
	}
	delete(s.records, prev.Key)
	s.forgotten[prev.Key] = f.Token
	return clone(old), true, nil
}

// swappable returns the stored record for prev.Key (zero if none or
// expired) and whether it is still the one the operator saw.
func (s *Store) swappable(prev idem.Record, now time.Time) (idem.Record, bool) {
	old, ok := s.records[prev.Key]
	if !ok || old.Expired(now) {
		return idem.Record{}, false
	}
	return old, idem.StillAsRead(prev, old)
}

// Complete implements idem.Store.
func (s *Store) Complete(_ context.Context, f idem.Finish) error {
	return s.finish(f, func(rec *idem.Record) {
		rec.Status = idem.StatusSucceeded
		rec.Result = slices.Clone(f.Result)
		if rec.Result == nil {
			rec.Result = []byte{}
		}
		rec.ErrorCode, rec.ErrorMessage, rec.Retryable = "", "", false
		rec.HoldUntil = time.Time{}
	})
}

// Fail implements idem.Store.
func (s *Store) Fail(_ context.Context, f idem.Finish) error {
	return s.finish(f, func(rec *idem.Record) {
		rec.Status = idem.StatusFailed
		rec.Result = nil
		rec.ErrorCode, rec.ErrorMessage, rec.Retryable = f.ErrorCode, f.ErrorMessage, f.Retryable
		rec.HoldUntil = f.HoldUntil
	})
}

func (s *Store) finish(f idem.Finish, set func(*idem.Record)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[f.Key]
	// Fenced: only the token holder writes. A stale owner must never
	// overwrite the record of the one that took over.
	if !ok || rec.Token != f.Token {
		return idem.ErrLeaseLost
	}
	set(&rec)
	rec.Attempts, rec.ExpiresAt, rec.UpdatedAt = f.Attempts, f.ExpiresAt, f.Now
	s.records[f.Key] = rec
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(_ context.Context, key string, now time.Time) (idem.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	if !ok || rec.Expired(now) {
		return idem.Record{}, false, nil
	}
	return clone(rec), true, nil
}

// RecordPoison implements idem.PoisonRecorder.
func (s *Store) RecordPoison(_ context.Context, p idem.Poison) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.poison[p.ID] = p
	return nil
}

// GetPoison implements idem.PoisonStore.
func (s *Store) GetPoison(_ context.Context, id string, now time.Time) (idem.Poison, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.poison[id]
	if !ok || !now.Before(p.ExpiresAt) {
		return idem.Poison{}, false, nil
	}
	return p, true, nil
}

// Poisons returns the poison notes, for tests and demos.
func (s *Store) Poisons() map[string]idem.Poison {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.poison)
}

func clone(r idem.Record) idem.Record {
	if r.Result != nil {
		r.Result = slices.Clone(r.Result)
	}
	return r
}

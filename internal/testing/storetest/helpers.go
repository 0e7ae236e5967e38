// Package storetest holds the conformance suites of the contracts that are
// not public: the operators' writes (RunOperatorTests, idem.Operator) and
// the engine's abandonment over a store (RunAbandonTests). The public
// store contract's suite is github.com/oncely/oncely/storetest; a store of
// this project runs both.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// These helpers are the public suite's own, repeated here in a few lines
// rather than exported from it: the public package's API is for store
// authors, and these are not.

const (
	fpA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	fpB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// base is a real epoch instant on a whole second.
func base() time.Time { return time.Now().Truncate(time.Second) }

func uniqueKey(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(name) > 90 {
		name = name[len(name)-90:]
	}
	return "evt:" + name + ":" + hex.EncodeToString(b[:])
}

func token(*testing.T) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func reservation(t *testing.T, key, fp string, now time.Time) idem.Reservation {
	return idem.Reservation{Key: key, Fingerprint: fp, Token: token(t), Now: now,
		LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)}
}

func mustReserve(t *testing.T, s idem.Store, r idem.Reservation) idem.Record {
	t.Helper()
	rec, ok, err := s.Reserve(context.Background(), r)
	if err != nil || !ok {
		t.Fatalf("Reserve(%s) = acquired %v, err %v; want acquired", r.Key, ok, err)
	}
	return rec
}

func finish(r idem.Reservation, now time.Time, attempts int) idem.Finish {
	return idem.Finish{Key: r.Key, Token: r.Token, Now: now, Attempts: attempts, ExpiresAt: now.Add(time.Hour)}
}

func mustGet(t *testing.T, s idem.Store, key string, now time.Time) idem.Record {
	t.Helper()
	rec, ok, err := s.Get(context.Background(), key, now)
	if err != nil || !ok {
		t.Fatalf("Get(%s) = found %v, err %v; want found", key, ok, err)
	}
	return rec
}

// heldFailure stores a retryable failure of a fresh key held off until
// now+hold, and returns the record as read back at now.
func heldFailure(t *testing.T, s idem.Store, now time.Time, hold time.Duration) idem.Record {
	t.Helper()
	r := reservation(t, uniqueKey(t), fpA, now)
	mustReserve(t, s, r)
	f := finish(r, now, 1)
	f.ErrorCode, f.ErrorMessage, f.Retryable = idem.CodeTransientFailure, "timed out once written", true
	f.HoldUntil = now.Add(hold)
	if err := s.Fail(context.Background(), f); err != nil {
		t.Fatalf("Fail with a hold-off: %v", err)
	}
	return mustGet(t, s, r.Key, now)
}

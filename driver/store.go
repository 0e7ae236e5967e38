package driver

import (
	"context"
	"time"
)

// Status is a record's state.
type Status string

// The record states. A key is reserved IN_PROGRESS before any work starts,
// and ends SUCCEEDED or FAILED.
const (
	StatusInProgress Status = "IN_PROGRESS"
	StatusSucceeded  Status = "SUCCEEDED"
	StatusFailed     Status = "FAILED"
)

// Record is what a store keeps for one key.
type Record struct {
	Key         string
	Status      Status
	Fingerprint string // hex SHA-256 of the canonical payload
	Attempts    int    // executions of the action so far, across take-overs
	Token       string // the current owner's fencing token
	LeaseUntil  time.Time
	ExpiresAt   time.Time // retention end; after it the record counts as absent
	Result      []byte    // SUCCEEDED: the stored result, byte for byte
	// FAILED: the stored failure. Retryable failures may be taken over.
	ErrorCode    Code
	ErrorMessage string
	Retryable    bool
	// HoldUntil, on a retryable FAILED record, is when it may be taken
	// over: the engine's pause after a request that may have reached its
	// receiver (the engine's SentPause option), which may still be acting on it. Zero
	// (every record without a hold, and every record written before holds
	// existed) means at once.
	HoldUntil time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// Audit is what operators did to the record by hand (who, when, why),
	// at most MaxAudit bytes. It is opaque to the engine; take-overs carry
	// it forward, so it survives the next delivery.
	Audit string
}

// Expired reports whether the record's retention has ended at now. An
// expired record counts as absent, whatever the store still holds: DynamoDB
// TTL deletes lazily, up to days late.
func (r Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// Claimable reports whether a new owner may take the record over at now:
// an IN_PROGRESS record whose lease has ended, or a retryable FAILED one
// whose hold-off has ended. A lease or hold-off that ends exactly at now
// has ended.
func (r Record) Claimable(now time.Time) bool {
	switch r.Status {
	case StatusInProgress:
		return !now.Before(r.LeaseUntil)
	case StatusFailed:
		return r.Retryable && !now.Before(r.HoldUntil)
	}
	return false
}

// BusyUntil is when a record that is not claimable now but will be (an
// IN_PROGRESS lease, a retryable failure's hold-off) becomes claimable:
// what a refused caller waits for.
func (r Record) BusyUntil() time.Time {
	if r.Status == StatusFailed {
		return r.HoldUntil
	}
	return r.LeaseUntil
}

// Reservation is a request to own a key.
type Reservation struct {
	Key         string
	Fingerprint string
	Token       string    // the new owner's fencing token, fresh and random
	Now         time.Time // the engine's clock; stores compare expiry against it
	LeaseUntil  time.Time
	ExpiresAt   time.Time
}

// Finish is a request to complete or fail an owned key.
type Finish struct {
	Key       string
	Token     string // must equal the stored token, or the store returns ErrLeaseLost
	Now       time.Time
	Attempts  int       // executions so far, written with the final state
	ExpiresAt time.Time // retention restarts at completion
	Result    []byte    // Complete only
	// Fail only.
	ErrorCode    Code
	ErrorMessage string
	Retryable    bool
	// HoldUntil, on a retryable failure, is the hold-off to store
	// (Record.HoldUntil); zero stores none.
	HoldUntil time.Time
}

// Store keeps records and makes the reservation atomic. This comment is the
// contract, and the conformance suite (storetest) checks it against every
// driver.
//
// Implementations must be safe for concurrent use by many goroutines and
// processes (where their backend allows). Every method that writes a record
// is a single conditional operation: a store never overwrites a record it
// was not entitled to overwrite. (Poison notes, PoisonRecorder, are plain
// writes in a key space of their own: a key never contains the separator
// that names it.) Expiry is compared at whole seconds, as TTL stores it; a
// store may keep leases at milliseconds.
//
// Errors. A store never retries on its own (a driver's SDK may) and
// classifies every error it returns with [ClassifiedError], so that
// [Classify] gives:
//   - ClassTransient for throttling, server errors and a request that was
//     never sent (the engine may retry, and a read always may);
//   - ClassOutcomeUnknown for a write that was sent and got no reply: it may
//     have taken effect;
//   - ClassPermanent for what a retry will not fix (a missing table, a
//     denied permission, a malformed record), with a message naming it.
//
// Ownership. A write that carries the owner's own token and finds the
// owner's IN_PROGRESS record (a re-send of a write whose reply was lost)
// reports ownership: Reserve and TakeOver return the record with acquired
// true, and write nothing new.
type Store interface {
	// Reserve creates the record for r.Key as IN_PROGRESS with r.Token,
	// Attempts 1, r.LeaseUntil and r.ExpiresAt, CreatedAt and UpdatedAt
	// r.Now, if no record exists or the existing one has expired at r.Now.
	//
	// If a live record exists, Reserve writes nothing and returns it: with
	// acquired true if it is IN_PROGRESS under r.Token (see Ownership),
	// with acquired false otherwise. It never compares fingerprints; the
	// engine does.
	Reserve(ctx context.Context, r Reservation) (rec Record, acquired bool, err error)

	// TakeOver replaces prev, a record the engine found Claimable, with an
	// IN_PROGRESS record owned by r.Token, with Attempts prev.Attempts+1,
	// prev.CreatedAt, prev.Audit, and no result, failure or hold-off
	// fields. It is a compare-and-swap: it succeeds only if the stored
	// record still has prev's token, status and attempts, r.Fingerprint,
	// and is still claimable (its lease or hold-off ended) and unexpired at
	// r.Now, judged on the stored values, never on prev's. Of many racing
	// take-overs of one record, exactly one succeeds.
	//
	// If the swap fails, TakeOver writes nothing and returns the record it
	// found (zero Record with acquired false if it found none or an expired
	// one), or acquired true if that record is IN_PROGRESS under r.Token.
	TakeOver(ctx context.Context, prev Record, r Reservation) (rec Record, acquired bool, err error)

	// Complete marks f.Key SUCCEEDED with f.Result, f.Attempts, f.ExpiresAt
	// and UpdatedAt f.Now if the stored token is f.Token; otherwise (another
	// token, or no record) it writes nothing and returns an error matching
	// ErrLeaseLost. Completing twice with the same token is allowed and
	// writes the same state. The result comes back byte for byte, falsy and
	// empty ones included. A result the store cannot hold gives a permanent
	// error with code RESULT_TOO_LARGE naming the size and the limit.
	Complete(ctx context.Context, f Finish) error

	// Fail marks f.Key FAILED with f's error fields, f.Attempts,
	// f.ExpiresAt and f.HoldUntil (when not zero) if the stored token is
	// f.Token; otherwise it writes nothing and returns ErrLeaseLost. A
	// retryable failure releases the key for a take-over once its
	// hold-off, if any, has ended; no take-over succeeds before.
	Fail(ctx context.Context, f Finish) error

	// Get returns the record for key, with found false if there is none or
	// it has expired at now. Reads are strongly consistent.
	Get(ctx context.Context, key string, now time.Time) (rec Record, found bool, err error)
}

// Effects are an action's own writes, in its store's terms (for DynamoDB:
// transaction items), handed back for the store to commit in one atomic
// operation with the record's completion. The domain only carries them.
type Effects interface {
	// Len is the number of writes.
	Len() int
}

// EffectStore is a Store that can commit an action's writes atomically
// with its completion: either both happen or neither does, so a crash can
// never leave the writes done and the record unfinished. This comment is
// its contract; the conformance suite checks it.
type EffectStore interface {
	Store
	// CompleteWithEffects does what Complete does and applies effects, in
	// one atomic operation, or neither:
	//   - the completion is conditional on the stored token being f.Token
	//     and the status IN_PROGRESS; otherwise nothing of effects is
	//     applied and the error matches ErrLeaseLost;
	//   - if one of the effects' own conditions fails, nothing is applied
	//     and the error is permanent with code EFFECT_CONDITION_FAILED,
	//     naming the item;
	//   - effects the store cannot commit (too many, too large, two writes
	//     to one item, not its kind) are refused before anything is sent,
	//     permanent with code INVALID_EFFECTS;
	//   - repeating a call whose outcome was unknown is safe: when the
	//     first one committed, the repeat reports success, never a failure.
	CompleteWithEffects(ctx context.Context, f Finish, effects Effects) error
}

// Poison is a note about a message that could not be processed as an event
// (not JSON, no key, an invalid key, a key reused with another payload).
// It holds the reason, a short description and a digest of the body, never
// the body or any part of it.
type Poison struct {
	ID string // the message id
	// Key is the idempotency key the message gave, when one was computed
	// before it was refused (KEY_REUSED: the record an operator looks at
	// next). Empty when the message gave no key, and in notes stored before
	// notes named keys.
	Key        string
	Reason     Code
	Detail     string // short, bounded by MaxPoisonDetail; types and paths, never values
	BodySHA256 string
	BodySize   int
	At         time.Time
	ExpiresAt  time.Time
}

// MaxPoisonDetail bounds a poison note's description, so a note always fits
// in a record whatever the message held.
const MaxPoisonDetail = 256

// PoisonRecorder stores poison notes. A message may be acknowledged only
// after its note is stored. Recording the same note twice is harmless.
type PoisonRecorder interface {
	RecordPoison(ctx context.Context, p Poison) error
}

// PoisonStore is a PoisonRecorder that can read its notes back (for
// operators, and for the conformance suite). GetPoison returns found false
// for an unknown id or an expired note.
type PoisonStore interface {
	PoisonRecorder
	GetPoison(ctx context.Context, id string, now time.Time) (p Poison, found bool, err error)
}

package oncely

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
)

func init() {
	engineref.Idem = func(e any) *idem.Engine {
		if e, ok := e.(*Engine); ok && e != nil {
			return e.e
		}
		return nil
	}
	engineref.Run = func(e any, ctx context.Context, req idem.Request, work idem.Work) idem.Outcome {
		return e.(*Engine).run(ctx, req, work)
	}
	engineref.Wrap = func(e *idem.Engine) any { return &Engine{e: e} }
}

// Defaults for [Options].
const (
	// DefaultRetention is how long a record is kept when Options.Retention
	// is zero.
	DefaultRetention = idem.DefaultRetention
	// DefaultLease is the lease when the context has no deadline and
	// Options.Lease is zero.
	DefaultLease = idem.DefaultLease
)

// Options configure an [Engine]. Every field documents its zero value.
type Options struct {
	// Retry bounds the attempts of transient failures, within one call and
	// optionally per key.
	Retry RetryPolicy
	// Budget divides an invocation's time (the context's deadline) between
	// the work, the store's writes and the caller's response.
	Budget Budget
	// Lease caps how long a reservation is owned: it ends at min(now+Lease,
	// the context's deadline). Zero means up to the deadline, or
	// DefaultLease when the context has none. A crashed owner's key is
	// taken over once its lease (plus SentPause) has ended.
	Lease time.Duration
	// Retention is how long a record is kept and replayed. Zero means
	// DefaultRetention (24 h). Keep it longer than the longest time a copy
	// of an event can arrive late (a queue's retention, a client's retries).
	Retention time.Duration
	// SentPause is the least time between an attempt whose request may have
	// reached its receiver (marked with [TransientSent]) and the next attempt
	// at the same key: the receiver may still be acting on the first. Set it
	// to your request's timeout. The engine holds the key off for it, in the
	// store, and every lease runs this much past its work's end, so that an
	// abandoned or crashed owner's key is not taken over sooner (a crash's
	// recovery takes SentPause longer). Zero means no pause.
	SentPause time.Duration
	// Classify, if set, classifies an error the action returned that nothing
	// marks, before the engine's own rules (see [Classify]): for example,
	// awserr.Classify makes AWS SDK throttling transient, and a write that
	// timed out outcome-unknown rather than transient. What it leaves as
	// ClassUnknown is judged by the engine's rules, as without it: an error
	// they do not know either is stored as a permanent failure and never
	// run again, since a retry might repeat a side effect.
	Classify func(error) Class
	// Logger receives unmarked errors, panics, lost leases, abandoned
	// actions and failed completion writes. Nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock that stamps records and judges their expiry. Nil
	// means time.Now. Tests use oncelytest's clock; a deployed function
	// leaves it nil.
	Now func() time.Time
}

// RetryPolicy bounds the retries of transient failures. It is plain data;
// every field documents its zero value.
type RetryPolicy struct {
	// AttemptsPerDelivery caps the executions of the action within one call.
	// When a transient failure uses the last one, the key is released for
	// the next delivery. A failure marked sent ends the call's attempts at
	// once. Zero means 3.
	AttemptsPerDelivery int
	// AttemptsPerKey caps the executions for one key across calls; reaching
	// it on a transient error stores RETRY_EXHAUSTED, which is permanent.
	// Zero means no cap: the caller's own redelivery policy decides.
	AttemptsPerKey int
	// Base is the first backoff delay; attempt n waits Base·2^(n-1). Zero
	// means 100 ms.
	Base time.Duration
	// Max caps the delay, and the Retry-After the engine sleeps through
	// in-call; a longer one ends the call and is handed to the caller in
	// the outcome's Retry-After. Zero means 2 s.
	Max time.Duration
	// Jitter adds a random fraction of the delay, in [0, Jitter). Zero means
	// none; 0.2 suits production.
	Jitter float64
}

// Budget divides an invocation's time, with D its deadline and L the
// lease's end:
//
//	store deadline = D − RespondReserve      every store call ends by then
//	work deadline  = min(L, store deadline) − StoreReserve
//	start rule     = work deadline − now ≥ MinWork, or the call is not started (DEADLINE)
//
// so that the caller always has time to answer. Zero fields mean 500 ms,
// 500 ms and 200 ms.
type Budget struct {
	StoreReserve   time.Duration
	RespondReserve time.Duration
	MinWork        time.Duration
}

// Reserve is the time an invocation keeps from its work: StoreReserve and
// RespondReserve, with their defaults.
func (b Budget) Reserve() time.Duration { return idem.Budget(b).Reserve() }

// WorkTime is how long work may run in an invocation of timeout (a
// function's timeout): timeout minus the Reserve. Check a downstream
// call's timeout against it at init.
func (b Budget) WorkTime(timeout time.Duration) time.Duration {
	return idem.Budget(b).WorkTime(timeout)
}

// Engine runs work at most once per key, as far as its store allows. It is
// safe for concurrent use.
type Engine struct {
	e        *idem.Engine
	classify func(error) Class
}

// New returns an Engine on store, or an error naming what is missing.
func New(store driver.Store, o Options) (*Engine, error) {
	if store == nil {
		return nil, errors.New("oncely: a store is required")
	}
	e, err := idem.New(idem.Options{
		Store: store, Retry: idem.RetryPolicy(o.Retry), Budget: idem.Budget(o.Budget),
		Lease: o.Lease, Retention: o.Retention, SentPause: o.SentPause, Logger: o.Logger, Now: o.Now,
	})
	if err != nil {
		return nil, err
	}
	return &Engine{e: e, classify: o.Classify}, nil
}

// Abandoned returns how many actions the engine stopped waiting for (they
// ignored their context past the work deadline) that are still running in
// this process. A long-lived process may exit between invocations past a
// bound of its choosing, rather than pile them up.
func (e *Engine) Abandoned() int { return e.e.Abandoned() }

// Request names one event: its key and its payload's fingerprint, computed
// once before the work runs, so that work that changes its input cannot
// change them. Build it with [NewRequest].
type Request struct {
	Key         string
	Fingerprint string
}

// NewRequest validates key (see [Key]) and fingerprints payload, a JSON
// document, by its canonical form (RFC 8785): the same event with its
// members in another order has the same fingerprint.
func NewRequest(key string, payload []byte) (Request, error) {
	r, err := idem.NewRequest(key, payload)
	if err != nil {
		return Request{}, keyError(err)
	}
	return Request(r), nil
}

// Work is what runs once per key: it returns the result to store (any
// bytes; JSON by convention), and optionally writes to commit atomically
// with the record's completion (see driver.EffectStore), or an error marked
// with [Transient], [Permanent] and friends.
type Work func(ctx context.Context) (result []byte, effects Effects, err error)

// Outcome says what a call of [Engine.Run] did.
type Outcome struct {
	Key string
	// Status is the record's state after the call; empty when nothing
	// about this call is stored.
	Status Status
	// Result is the stored result, on a success or a replayed one.
	Result []byte
	// Replayed is true when the outcome was read from the store and the
	// work did not run.
	Replayed bool
	// Stored is true when a record durably says what happened: SUCCEEDED,
	// or a permanent FAILED. Acknowledge a message only then.
	Stored bool
	// Attempts is the record's attempt count.
	Attempts int
	// Calls counts the executions of the work in this call.
	Calls int
	// Delays are the backoff delays slept in this call.
	Delays []time.Duration
	// Err is nil on a success or a replayed one. Err.RetryAfter, when
	// positive, is how long the caller should wait before trying again.
	Err *Error
}

// Run runs work at most once for req.Key:
//  1. it reserves the key with one conditional write before any work starts;
//  2. a live record is replayed (a success, a permanent failure), refused
//     (IN_PROGRESS, KEY_REUSED), or taken over (an ended lease, a released
//     failure) with a compare-and-swap;
//  3. the owner runs work, retrying transient failures with backoff, and
//     completes or fails the record fenced by its token.
//
// Work gets a context that ends at the work deadline (see [Budget]) and
// carries the key ([KeyFrom]).
func (e *Engine) Run(ctx context.Context, req Request, work Work) Outcome {
	return Outcome(e.run(ctx, idem.Request(req), idem.Work(work)))
}

// run is Run in the domain's types (this module's adapters call it through
// package engineref).
func (e *Engine) run(ctx context.Context, req idem.Request, work idem.Work) idem.Outcome {
	return e.e.DoWork(ctx, req, func(ctx context.Context) ([]byte, idem.Effects, error) {
		result, effects, err := work(context.WithValue(ctx, keyInContext{}, req.Key))
		return result, effects, e.classified(err)
	})
}

// classified applies Options.Classify to an error nothing marks, before
// the engine's own rules (a timeout is transient): the hook can know
// better, as awserr knows that a write that timed out may have been
// applied. What the engine's rules then call transient (a timeout, a
// reset, a connection cut, a context that ended) may have come after the
// work sent a request its receiver has: it is marked sent, so that no
// second attempt starts in this call and the key is held off for
// Options.SentPause. Only a failure before anything left (a refused dial,
// a name that did not resolve) stays plainly transient, retried at once.
func (e *Engine) classified(err error) error {
	if err == nil {
		return err
	}
	if _, marked := errors.AsType[*ClassifiedError](err); marked {
		return err
	}
	if e.classify != nil {
		if c := e.classify(err); c != ClassUnknown {
			return &ClassifiedError{Class: c, Err: err}
		}
	}
	if Classify(err) == ClassTransient && !neverSent(err) {
		return TransientSent(err)
	}
	return err
}

// neverSent reports whether err says that no connection was made: nothing
// of a request can have left.
func neverSent(err error) bool {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

type keyInContext struct{}

// KeyFrom returns the key of the work running with ctx, for a downstream
// that de-duplicates too (an Idempotency-Key header, a database's unique
// column). It is the same on every retry and every delivery of the event.
func KeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyInContext{}).(string)
	return k, ok
}

package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Defaults for [Options].
const (
	DefaultRetention = 24 * time.Hour
	DefaultLease     = 5 * time.Minute // only when ctx has no deadline and Options.Lease is zero
	maxMessageLen    = 1024
	maxReserveRounds = 4
	writeAttempts    = 3 // tries of a completion write
)

// Options configure an [Engine]. Only Store is required; every other field
// documents its zero value.
type Options struct {
	Store Store
	// Retry bounds the attempts per delivery and, optionally, per key.
	Retry RetryPolicy
	// Budget divides the invocation's time (the ctx deadline) between the
	// work, the store writes and the caller's response.
	Budget Budget
	// Lease caps how long a reservation is owned. The lease ends at
	// min(now+Lease, ctx deadline). Zero means up to the ctx deadline, or
	// DefaultLease when ctx has none.
	Lease time.Duration
	// Retention is how long a record is kept (expires_at). Zero means 24h.
	Retention time.Duration
	// SentPause is the least time between an attempt whose request may
	// have reached its receiver (ClassifiedError.Sent: a timeout or a
	// reset once written) and the next attempt at the same key: the
	// receiver may still be acting on the first. Set it to the action's
	// request timeout (the ready function uses NOTIFY_TIMEOUT): the
	// receiver then gets as long again as it already had. The engine
	// enforces it through the store, on every path:
	//   - the release after such a failure holds the key off until the
	//     pause has passed (Record.HoldUntil): a reservation or take-over
	//     meanwhile is refused as IN_PROGRESS, whatever the caller's
	//     backoff;
	//   - every lease is written this much past the end of the work's own
	//     lease, so that neither an abandoned action (which may still be
	//     running) nor a crashed worker's key is taken over sooner: a
	//     crash's recovery takes SentPause longer;
	//   - the outcome's RetryAfter is at least SentPause after a sent
	//     failure, and at least the receiver's own Retry-After.
	// Zero means no pause: a sent failure is released at once, as for an
	// action that makes no outbound request.
	SentPause time.Duration
	// Now is the clock. Nil means time.Now. The same clock stamps records
	// and judges their expiry.
	Now func() time.Time
	// Sleep waits d or until ctx ends. Nil means a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random returns a number in [0, 1) for jitter. Nil means math/rand/v2.
	Random func() float64
	// NewToken returns a fresh fencing token. Nil means 128 random bits in hex.
	NewToken func() string
	// Logger receives unknown errors, panics, lost leases, abandoned
	// actions and failed completion writes. Nil means slog.Default().
	Logger *slog.Logger
}

// Engine runs actions at most once per key, as far as its Store allows (see
// docs/guarantees.md). It is safe for concurrent use.
type Engine struct {
	o Options
	// abandoned counts the actions this engine stopped waiting for whose
	// goroutine has not returned yet (see Abandoned). It is the engine's
	// one piece of shared mutable state.
	abandoned atomic.Int64
}

// Abandoned returns how many actions the engine abandoned (it stopped
// waiting for them at their work deadline plus Budget.AbandonGrace,
// because they ignored their context) that are still running in this
// process. The wiring lets the process exit between invocations once it
// passes a bound, instead of piling up goroutines.
func (e *Engine) Abandoned() int { return int(e.abandoned.Load()) }

// New returns an Engine, or an error naming the missing option.
func New(o Options) (*Engine, error) {
	if o.Store == nil {
		return nil, errors.New("idem: Options.Store is required")
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Random == nil {
		o.Random = mrand.Float64
	}
	if o.NewToken == nil {
		o.NewToken = NewToken
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Engine{o: o}, nil
}

// Budget returns the time budget in force, for adapters that bound their
// own calls by it.
func (e *Engine) Budget() Budget { return e.o.Budget }

// Adapters share the engine's store, clock, jitter, retention and logger,
// so that their own writes (poison notes) and delays follow the engine's.

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.o.Store }

// Now reads the engine's clock.
func (e *Engine) Now() time.Time { return e.o.Now() }

// Random returns a jitter fraction in [0, 1) from the engine's source.
func (e *Engine) Random() float64 { return e.o.Random() }

// Retention returns how long the engine keeps records.
func (e *Engine) Retention() time.Duration { return e.o.Retention }

// Logger returns the engine's logger.
func (e *Engine) Logger() *slog.Logger { return e.o.Logger }

// Action is the work to run once per key. It returns the result to store
// (any bytes; JSON by convention) or an error, classified with
// [Transient], [Permanent] and friends. Errors nothing classifies are
// permanent (and logged with their type).
type Action func(ctx context.Context) ([]byte, error)

// Work is an Action that may also return writes to commit atomically with
// its completion, instead of performing them (see [EffectStore]). Nil
// effects complete as an Action does.
type Work func(ctx context.Context) (result []byte, effects Effects, err error)

// Outcome says what Do did.
type Outcome struct {
	Key string
	// Status is the record's state after the call; empty when nothing about
	// this call is stored.
	Status Status
	// Result is the stored result, on success or replay of a success.
	Result []byte
	// Replayed is true when the outcome was read from the store and the
	// action did not run.
	Replayed bool
	// Stored is true when a record durably says what happened: SUCCEEDED,
	// or a permanent FAILED. Adapters acknowledge a message only then.
	Stored bool
	// Attempts is the record's attempt count.
	Attempts int
	// Calls counts the executions of the action in this call.
	Calls int
	// Delays are the backoff delays slept in this call.
	Delays []time.Duration
	// Err is nil on success and replayed success.
	Err *Error
}

// Do runs fn at most once for req.Key (see Store for the exact rules):
//  1. It validates the request and reserves the key with one conditional
//     write, before any work starts.
//  2. A live record is replayed (SUCCEEDED, permanent FAILED), refused
//     (IN_PROGRESS, KEY_REUSED), or taken over (ended lease, retryable
//     failure) with a compare-and-swap.
//  3. The owner runs fn, retrying transient failures with backoff, and
//     completes or fails the record fenced by its token.
//
// The error is nil exactly when the outcome is a success; otherwise it is
// Outcome.Err.
func (e *Engine) Do(ctx context.Context, req Request, fn Action) (Outcome, error) {
	out := e.DoWork(ctx, req, func(ctx context.Context) ([]byte, Effects, error) {
		result, err := fn(ctx)
		return result, nil, err
	})
	if out.Err != nil {
		return out, out.Err
	}
	return out, nil
}

// DoWork is Do for work that may return effects: on success they are
// committed in the same atomic operation as the record's completion, so
// either both happened or neither did. What went wrong, if anything, is
// Outcome.Err.
func (e *Engine) DoWork(ctx context.Context, req Request, fn Work) Outcome {
	now := e.o.Now()
	res, workEnd, err := e.reservation(ctx, req, now)
	if err != nil {
		return Outcome{Key: req.Key, Err: err}
	}
	// Every store call, with the driver's own retries, ends by the store
	// deadline, so the caller always has time to answer per record.
	sctx, cancel := e.o.Budget.StoreContext(ctx)
	defer cancel()
	rec, out, owned := e.reserve(ctx, sctx, res)
	if !owned {
		return out
	}
	if now := e.o.Now(); !e.o.Budget.CanStart(now, workEnd) {
		// The reservation itself took the time (slow store calls, the SDK's
		// retries): the attempt would start with its context already ended.
		// Release the key without counting an attempt that never ran.
		rel := Outcome{Key: rec.Key, Attempts: rec.Attempts - 1}
		return e.fail(sctx, rel, res, &Error{Code: CodeDeadline, Message: fmt.Sprintf("the reservation left too little time to start: %v until the work deadline", workEnd.Sub(now).Round(time.Millisecond))}, true)
	}
	return e.run(ctx, sctx, rec, res, workEnd, fn)
}

// reservation validates req and, when the invocation leaves time to start
// the work, returns the reservation to write and the work deadline.
func (e *Engine) reservation(ctx context.Context, req Request, now time.Time) (Reservation, time.Time, *Error) {
	if err := ValidateKey(req.Key); err != nil {
		return Reservation{}, time.Time{}, err.(*Error)
	}
	if len(req.Fingerprint) != 64 {
		return Reservation{}, time.Time{}, &Error{Code: CodeInvalidPayload, Message: "fingerprint must be 64 hex digits; build requests with NewRequest"}
	}
	deadline, _ := ctx.Deadline()
	workLease := e.leaseEnd(deadline, now)
	workEnd := e.o.Budget.WorkDeadline(workLease, deadline)
	if !e.o.Budget.CanStart(now, workEnd) {
		return Reservation{}, time.Time{}, &Error{Code: CodeDeadline, Message: fmt.Sprintf("too little time left to start: %v until the work deadline", workEnd.Sub(now).Round(time.Millisecond)), Retryable: true}
	}
	// The stored lease runs the pause past the work's: an owner that
	// crashed, or an action abandoned while it may still be sending, keeps
	// the key until a request it made has had the pause to finish.
	leaseUntil := workLease.Add(e.o.SentPause)
	expires := now.Add(e.o.Retention)
	if expires.Before(leaseUntil) {
		// Retention never ends before the lease: an expired record counts
		// as absent, and a live owner's record must not.
		expires = leaseUntil
	}
	return Reservation{
		Key:         req.Key,
		Fingerprint: req.Fingerprint,
		Token:       e.o.NewToken(),
		Now:         now,
		LeaseUntil:  leaseUntil,
		ExpiresAt:   expires,
	}, workEnd, nil
}

// reserve makes this call the owner of res.Key: it writes the reservation
// or takes an ended owner's record over. When it reports false, the call
// ends with the outcome it returns: a replay, a refusal or a store error
// (with the attempt count of the last record it met).
func (e *Engine) reserve(ctx, sctx context.Context, res Reservation) (Record, Outcome, bool) {
	out := Outcome{Key: res.Key}
	// Reserve before any work starts: a duplicate arriving from now on must
	// see IN_PROGRESS, not an empty slot.
	rec, acquired, err := e.o.Store.Reserve(sctx, res)
	for round := 0; !acquired; round++ {
		if err != nil {
			out.Err = e.storeError(ctx, "reserve", res.Key, err)
			return rec, out, false
		}
		if round == maxReserveRounds {
			// Contention beyond reason; the caller retries later.
			out.Err = &Error{Code: CodeInProgress, Message: "the key changed hands repeatedly while reserving it", Retryable: true}
			return rec, out, false
		}
		if rec.Key == "" {
			// The record vanished (retention ended) between two calls.
			rec, acquired, err = e.o.Store.Reserve(sctx, res)
			continue
		}
		var ended bool
		if out, ended = e.existing(out, rec, res); ended {
			return rec, out, false
		}
		// Compare-and-swap on the previous owner's token: of racing
		// take-overs exactly one wins, the others see its record.
		rec, acquired, err = e.o.Store.TakeOver(sctx, rec, res)
	}
	if err != nil {
		out.Err = e.storeError(ctx, "reserve", res.Key, err)
		return rec, out, false
	}
	return rec, out, true
}

// existing decides what a call meets in another owner's live record rec,
// completing out: a replay (SUCCEEDED, permanent FAILED) or a refusal
// (KEY_REUSED, a live IN_PROGRESS lease), reported with true; or, with
// false, a record that may be taken over (an ended lease, a retryable
// failure).
func (e *Engine) existing(out Outcome, rec Record, res Reservation) (Outcome, bool) {
	if rec.Fingerprint != res.Fingerprint {
		out.Err = &Error{Code: CodeKeyReused, Message: "the key is already used with a different payload"}
		return out, true
	}
	out.Attempts = rec.Attempts
	switch {
	case rec.Status == StatusSucceeded:
		out.Status, out.Result, out.Replayed, out.Stored = rec.Status, rec.Result, true, true
		return out, true
	case rec.Status == StatusFailed && !rec.Retryable:
		out.Status, out.Replayed, out.Stored = rec.Status, true, true
		out.Err = &Error{Code: rec.ErrorCode, Message: rec.ErrorMessage}
		return out, true
	case rec.Claimable(res.Now):
		return out, false
	case rec.Status == StatusFailed: // released under a hold-off: its receiver may still be acting on the last request
		out.Status = rec.Status
		out.Err = &Error{Code: CodeInProgress, Message: "the key is held off: the last attempt's request may still be with its receiver", Retryable: true, RetryAfter: rec.BusyUntil().Sub(res.Now)}
		return out, true
	default: // IN_PROGRESS with a live lease
		out.Status = rec.Status
		out.Err = &Error{Code: CodeInProgress, Message: "another worker holds the key", Retryable: true, RetryAfter: rec.BusyUntil().Sub(res.Now)}
		return out, true
	}
}

// leaseEnd returns min(now+Lease, deadline); a zero deadline means none. A
// lease that ends exactly at the deadline is a lease: 0 time left never
// means "no deadline".
func (e *Engine) leaseEnd(deadline, now time.Time) time.Time {
	end := now.Add(e.o.Lease)
	switch {
	case !deadline.IsZero() && (e.o.Lease <= 0 || deadline.Before(end)):
		end = deadline
	case deadline.IsZero() && e.o.Lease <= 0:
		end = now.Add(DefaultLease)
	}
	return end
}

// run executes fn as the owner of rec and records the outcome. ctx is the
// caller's; sctx bounds the store calls; the action's own ctx ends at
// workEnd.
func (e *Engine) run(ctx, sctx context.Context, rec Record, res Reservation, workEnd time.Time, fn Work) Outcome {
	out := Outcome{Key: rec.Key, Attempts: rec.Attempts}
	p := e.o.Retry
	if p.keyCapReached(rec.Attempts - 1) {
		// A crashed owner used the last attempt: record the verdict without
		// running again. The take-over counted an attempt that never ran.
		out.Attempts = rec.Attempts - 1
		return e.fail(sctx, out, res, &Error{Code: CodeRetryExhausted, Message: fmt.Sprintf("%d attempts used", out.Attempts)}, false)
	}
	runCtx, cancel := context.WithDeadline(ctx, workEnd)
	defer cancel()
	for {
		out.Calls++
		result, effects, err := e.call(runCtx, rec.Key, fn)
		if ab, ok := err.(*abandonment); ok { // call's own, unwrapped: an action can only hold one inside an *Error
			return e.abandon(ctx, out, res, ab)
		}
		if err == nil {
			return e.complete(sctx, out, res, result, effects)
		}
		class := Classify(err)
		if class == ClassUnknown {
			// Unmarked: a retry might repeat a side effect, so permanent.
			e.o.Logger.WarnContext(ctx, "unclassified action error", "key", rec.Key, "error", err.Error(), "type", fmt.Sprintf("%T", err), "treated_as", ClassPermanent.String())
			class = ClassPermanent
		}
		if class != ClassTransient {
			return e.settle(sctx, out, res, err)
		}
		if p.keyCapReached(out.Attempts) {
			return e.fail(sctx, out, res, &Error{Code: CodeRetryExhausted, Message: fmt.Sprintf("%d attempts used; last error: %v", out.Attempts, err), Err: err}, false)
		}
		if IsNextDelivery(err) {
			// The same answer again if tried now: end the delivery, no pause.
			return e.release(sctx, out, res, err, retryAfterOf(err))
		}
		if IsSent(err) {
			// The receiver may have the request and still be acting on it:
			// a second attempt now could do the side effect twice at once.
			// The delivery ends here; release holds the key off for the
			// pause (Options.SentPause).
			return e.release(sctx, out, res, err, retryAfterOf(err))
		}
		delay, ok := p.Delay(out.Calls, retryAfterOf(err), e.o.Random())
		if !ok {
			// The downstream asked for a pause longer than we sleep in-call:
			// hand its Retry-After to the caller, who honours it.
			return e.release(sctx, out, res, err, delay)
		}
		if out.Calls >= p.attemptsPerDelivery() {
			// This delivery's attempts are used: release the key, and let
			// the queue bring the event back (its redrive policy decides
			// when to give up).
			return e.release(sctx, out, res, err, 0)
		}
		if e.o.Now().Add(delay).After(workEnd) {
			return e.release(sctx, out, res, err, 0)
		}
		if serr := e.o.Sleep(runCtx, delay); serr != nil {
			return e.release(sctx, out, res, err, 0)
		}
		out.Delays = append(out.Delays, delay)
		out.Attempts++
	}
}

// settle stores the verdict on an action's error that is not transient:
// OUTCOME_UNKNOWN when the side effect may have happened (it is not run
// again), a permanent failure otherwise (unmarked errors included), with
// the error's own code when it carries one.
func (e *Engine) settle(ctx context.Context, out Outcome, res Reservation, err error) Outcome {
	code := CodePermanentFailure
	if Classify(err) == ClassOutcomeUnknown {
		code = CodeOutcomeUnknown
	}
	return e.fail(ctx, out, res, &Error{Code: codeOf(err, code), Message: err.Error(), Err: err}, false)
}

// release records a transient failure as retryable FAILED, keeping the
// attempt count and the last error, so a later delivery takes the key over.
// retryAfter, when positive, is a pause the downstream asked for that was
// not honoured in-call; the outcome carries it for the caller.
//
// After a failure whose request may have reached its receiver (IsSent),
// this is the one place the pause is decided: the record is held off for
// Options.SentPause, which the store enforces in every reservation and
// take-over, and the outcome's RetryAfter is at least that long, so that
// each adapter's delay (SQS visibility, API Retry-After) is too.
func (e *Engine) release(ctx context.Context, out Outcome, res Reservation, err error, retryAfter time.Duration) Outcome {
	var hold time.Time
	if pause := e.o.SentPause; pause > 0 && IsSent(err) {
		hold = e.o.Now().Add(pause)
		retryAfter = max(retryAfter, pause)
	}
	return e.failHeld(ctx, out, res, &Error{Code: CodeTransientFailure, Message: err.Error(), RetryAfter: retryAfter, Err: err}, true, hold)
}

// attempt is what one execution of the action returned.
type attempt struct {
	result  []byte
	effects Effects
	err     error
}

// abandonment is call's answer when the action did not return in time: its
// execution goes on, and done receives what it returns.
type abandonment struct {
	waited time.Duration // since the action's context ended
	done   <-chan attempt
}

func (a *abandonment) Error() string {
	return fmt.Sprintf("the action did not return within %v of its context's end", a.waited.Round(time.Millisecond))
}

// call runs fn on a goroutine of its own, turning a panic into a permanent
// PANIC error, and waits for it until ctx (the action's, which ends at the
// work deadline) is done and then Budget.AbandonGrace more. An action that
// ignores its context is then abandoned: call returns an *abandonment, and
// the invocation answers in time instead of being held past its deadline
// (under Managed Instances a late answer ends the whole process).
func (e *Engine) call(ctx context.Context, key string, fn Work) ([]byte, Effects, error) {
	done := make(chan attempt, 1) // buffered: an abandoned action never blocks on it
	go func() {
		var a attempt
		returned := false
		defer func() {
			if r := recover(); r != nil {
				e.o.Logger.ErrorContext(ctx, "action panicked", "key", key, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				a = attempt{err: PermanentCode(CodePanic, fmt.Errorf("panic: %v", r))}
			} else if !returned {
				// runtime.Goexit (t.FailNow in a test's action, or a library
				// that calls it): the action neither returned nor panicked,
				// and its zero attempt must not pass for a success.
				e.o.Logger.ErrorContext(ctx, "action exited its goroutine without returning", "key", key)
				a = attempt{err: PermanentCode(CodePanic, errors.New("the action called runtime.Goexit"))}
			}
			done <- a
		}()
		a.result, a.effects, a.err = fn(ctx)
		returned = true
	}()
	select {
	case a := <-done:
		return a.result, a.effects, a.err
	case <-ctx.Done():
	}
	// A real timer, not Options.Sleep: the context's end is real time too.
	grace := time.NewTimer(e.o.Budget.AbandonGrace())
	defer grace.Stop()
	select {
	case a := <-done:
		return a.result, a.effects, a.err
	case <-grace.C:
		return nil, nil, &abandonment{waited: e.o.Budget.AbandonGrace(), done: done}
	}
}

// abandon ends the call of an action that did not return in time. It
// writes nothing: the action's own return is the one write of this call
// still to come (recordAbandonedReturn), so nothing of this invocation can
// race it. The record stays IN_PROGRESS under this call's token until its
// lease ends (the invocation's deadline plus Options.SentPause: the action
// may still be sending), and a duplicate meanwhile sees IN_PROGRESS. The
// outcome is retryable and not stored (the message goes back to its queue;
// the API answers 503 with Retry-After at the lease's end).
func (e *Engine) abandon(ctx context.Context, out Outcome, res Reservation, ab *abandonment) Outcome {
	running := e.abandoned.Add(1)
	e.o.Logger.WarnContext(ctx, "action abandoned: it ignored its context past the work deadline; the invocation answers without it",
		"key", out.Key, "attempts", out.Attempts, "lease_until", res.LeaseUntil, "abandoned_running", running)
	// The invocation's context is cancelled once it has answered; the late
	// completion keeps its values (the request id of the log lines).
	go e.recordAbandonedReturn(context.WithoutCancel(ctx), out, res, ab.done)
	out.Status, out.Result, out.Stored = StatusInProgress, nil, false
	out.Err = &Error{Code: CodeAbandoned, Message: ab.Error(), Retryable: true, RetryAfter: max(res.LeaseUntil.Sub(e.o.Now()), 0), Err: ab}
	return out
}

// recordAbandonedReturn waits for an abandoned action and records what it
// returned, fenced by the abandoned call's token like any completion: the
// Store writes only while that token is still the record's (nobody took
// the key over, which the lease forbids until the deadline plus the pause),
// and otherwise the result is discarded (LEASE_LOST, logged). A transient
// error is released as any other, with the hold-off if its request may
// have reached the receiver. It never retries the action.
func (e *Engine) recordAbandonedReturn(ctx context.Context, out Outcome, res Reservation, done <-chan attempt) {
	a := <-done
	// Counted until its write is over: a process that exits at the bound
	// does not cut a late completion short.
	defer e.abandoned.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, e.o.Budget.storeReserve())
	defer cancel()
	switch {
	case a.err == nil:
		out = e.complete(wctx, out, res, a.result, a.effects)
	case Classify(a.err) == ClassTransient:
		out = e.release(wctx, out, res, a.err, 0)
	default: // permanent, outcome unknown, or unmarked (permanent by the engine's rule)
		out = e.settle(wctx, out, res, a.err)
	}
	e.o.Logger.InfoContext(ctx, "abandoned action returned", "key", out.Key, "outcome", string(out.Label()), "stored", out.Stored)
}

func (e *Engine) finish(res Reservation, attempts int) Finish {
	now := e.o.Now()
	return Finish{Key: res.Key, Token: res.Token, Now: now, Attempts: attempts, ExpiresAt: now.Add(e.o.Retention)}
}

// complete stores the success, with the action's effects in the same
// atomic write when there are any. The Finish is built once: a repeated
// write sends exactly the same request (the store's idempotency token for
// a transaction depends on it).
func (e *Engine) complete(ctx context.Context, out Outcome, res Reservation, result []byte, effects Effects) Outcome {
	f := e.finish(res, out.Attempts)
	f.Result = result
	op := func() error { return e.o.Store.Complete(ctx, f) }
	if effects != nil && effects.Len() > 0 {
		es, ok := e.o.Store.(EffectStore)
		if !ok {
			return e.fail(ctx, out, res, &Error{Code: CodeInvalidEffects, Message: fmt.Sprintf("the action returned %d writes, and the store cannot commit writes (%T)", effects.Len(), e.o.Store)}, false)
		}
		op = func() error { return es.CompleteWithEffects(ctx, f, effects) }
	}
	err := e.write(ctx, op)
	if err == nil {
		out.Status, out.Result, out.Stored = StatusSucceeded, result, true
		return out
	}
	if ce, ok := errors.AsType[*ClassifiedError](err); ok && ce.Class == ClassPermanent {
		switch ce.Code {
		case CodeResultTooLarge, CodeEffectConditionFailed, CodeInvalidEffects:
			// Nothing was applied: record why, permanently.
			return e.fail(ctx, out, res, &Error{Code: ce.Code, Message: err.Error(), Err: err}, false)
		}
	}
	return e.writeFailed(ctx, out, "complete", err)
}

// fail records failure (released for a take-over when retryable) and
// returns the outcome carrying it. The record stores the code and its fixed
// sentence, which API callers see on every replay; the detail (the
// message built here, the underlying error: hosts, tables, panic values,
// the last error) goes to this attempt's log line, with the key.
func (e *Engine) fail(ctx context.Context, out Outcome, res Reservation, failure *Error, retryable bool) Outcome {
	return e.failHeld(ctx, out, res, failure, retryable, time.Time{})
}

// failHeld is fail with a hold-off for the released record (zero: none).
func (e *Engine) failHeld(ctx context.Context, out Outcome, res Reservation, failure *Error, retryable bool, hold time.Time) Outcome {
	level := slog.LevelWarn
	if retryable {
		level = slog.LevelInfo // the next delivery runs it again
	}
	e.o.Logger.Log(ctx, level, "attempt failed", "key", out.Key, "code", string(failure.Code), "retryable", retryable,
		"attempts", out.Attempts, "detail", Truncate(failure.Message, maxMessageLen))
	failure.Retryable = retryable
	failure.Message = Sentence(failure.Code)
	f := e.finish(res, out.Attempts)
	f.ErrorCode, f.ErrorMessage, f.Retryable = failure.Code, failure.Message, retryable
	if !hold.IsZero() {
		f.HoldUntil = hold
		// Retention never ends before the hold-off: an expired record
		// counts as absent, and a held one must not.
		f.ExpiresAt = later(f.ExpiresAt, hold)
	}
	if err := e.write(ctx, func() error { return e.o.Store.Fail(ctx, f) }); err != nil {
		return e.writeFailed(ctx, out, "fail", err)
	}
	out.Status, out.Err = StatusFailed, failure
	out.Stored = !retryable
	return out
}

// write runs a completion write, retrying transient and outcome-unknown
// failures up to writeAttempts times: both writes are conditional on our
// token, so repeating one that did land writes the same state again. The
// budget is its own, not the action's attempt cap: an action allowed one
// attempt still deserves a completion that survives one throttle.
func (e *Engine) write(ctx context.Context, op func() error) error {
	p := e.o.Retry
	var err error
	for n := 1; ; n++ {
		if err = op(); err == nil {
			return nil
		}
		if c := Classify(err); (c != ClassTransient && c != ClassOutcomeUnknown) || n >= writeAttempts {
			return err
		}
		d, _ := p.Delay(n, 0, e.o.Random())
		if e.o.Sleep(ctx, d) != nil {
			return err
		}
	}
}

// writeFailed turns a failed completion write into the outcome. The work may
// have been done; the record stays IN_PROGRESS with our token until its
// lease ends.
func (e *Engine) writeFailed(ctx context.Context, out Outcome, op string, err error) Outcome {
	if errors.Is(err, ErrLeaseLost) {
		// Counted by its label, lease_lost.
		e.o.Logger.WarnContext(ctx, "lease lost: result discarded", "key", out.Key, "op", op, "attempts", out.Attempts)
		out.Status, out.Result, out.Stored = "", nil, false
		out.Err = &Error{Code: CodeLeaseLost, Message: "the lease was taken over before " + op + "; the result was discarded", Retryable: true, Err: err}
		return out
	}
	if Classify(err) != ClassPermanent { // storeError logs a refusal
		e.o.Logger.ErrorContext(ctx, "completion write failed", "key", out.Key, "op", op, "error", err.Error(), StoreAttr(err))
	}
	out.Status, out.Stored = StatusInProgress, false
	out.Err = e.storeError(ctx, op, out.Key, err)
	return out
}

// storeError maps a store failure to the engine's codes. Whatever its class,
// nothing final is known to be stored, so adapters must not acknowledge. A
// refusal a retry will not fix (a missing table, a denied permission) is
// logged at ERROR with what the store says about it (ddbstore: the table
// and DynamoDB's error code); its label, store_refused, counts it.
func (e *Engine) storeError(ctx context.Context, op, key string, err error) *Error {
	if Classify(err) == ClassPermanent {
		e.o.Logger.ErrorContext(ctx, "the store refused the call; retrying will not help", "key", key, "op", op, "error", err.Error(), StoreAttr(err))
		return &Error{Code: CodeStoreMisconfigured, Message: op + ": " + err.Error(), Err: err}
	}
	return &Error{Code: CodeStoreUnavailable, Message: op + ": " + err.Error(), Retryable: true, Err: err}
}

// Truncate cuts s to at most n bytes without splitting a UTF-8 character:
// it returns s itself when len(s) <= n, and otherwise the longest prefix of
// at most n bytes that ends on a character boundary (so a stored message
// replays byte for byte and a printed one is never cut mid-character). A
// negative n counts as zero. Truncate adds no marker: a caller that shows
// the cut appends one itself when len(s) > n, for example
//
//	if len(s) > n {
//		s = idem.Truncate(s, n) + "…"
//	}
//
// and then holds at most n+len("…") bytes. It is the one truncator of the
// project; opsctl and the adapters use it.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NewToken returns a fresh fencing token: 128 bits from crypto/rand, in
// lower-case hex (32 characters). It is the default of Options.NewToken and
// the token operators' writes (oncelyctl release, forget) carry; tokens
// only need to differ, so nothing parses them.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

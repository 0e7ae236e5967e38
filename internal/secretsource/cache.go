package secretsource

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// cache holds the last value read and the refresh rule Source and Document
// share:
//
//   - One read at a time per process. A read runs on its own goroutine with
//     its own timeout (readTimeout), detached from the invocation that
//     started it (context.WithoutCancel): an invocation with 300 ms left
//     cannot cut the read short for every invocation after it. Every caller
//     that wants a read shares the one in flight, and waits for it within
//     its own ctx.
//   - A value older than refresh is read again by the next caller; the
//     callers wait for that read and get its value, or the value held when
//     it failed or their ctx ended: once read, a value stays in use through
//     any failed re-read.
//   - A failed read is tried again after a capped backoff (failedBackoff:
//     1 s, 2 s, 4 s, then every 8 s), not on every caller, and not after a
//     30 s pause that would pin the old value through a rotation.
//   - Until a first read succeeds (Secrets Manager down at the cold start),
//     callers get a transient error: their deliveries go back with backoff,
//     nothing is acknowledged, and the next read is tried by the same rule.
//   - A recheck (a receiver refused a signature) asks for a read that began
//     after a given mark, at most one per recheckInterval.
//
// Reads are numbered as they begin (begun); held is the number of the read
// whose value is held. Reads no longer overlap, but a read's value is only
// stored if no later-begun read's value is held: the rule that an older
// read never rolls a value back stays where it is enforced.
type cache[T any] struct {
	read    func(ctx context.Context) (T, error)
	refresh time.Duration // negative: never stale once read
	now     func() time.Time
	// failed, if set, hears of every failed read outside the lock, except
	// the first read an explicit reload makes (init's: its caller gets the
	// error): its error, how long the read ran, how long until the next
	// read is tried, and whether a value is held.
	failed func(ctx context.Context, err error, took, retryIn time.Duration, held bool)

	mu     sync.Mutex
	value  T
	loaded bool
	readAt time.Time
	begun  uint64
	held   uint64
	flight *flight // the read in progress, if any
	// After a failed read: how many failed in a row, the last error, and
	// when the refresh rule may start the next read.
	failures int
	lastErr  error
	retryAt  time.Time
	// recheckAt is when the last recheck read began (recheckInterval).
	recheckAt time.Time
}

// flight is one read in progress; done closes when it has ended and its
// value (if any) is stored.
type flight struct {
	n    uint64
	done chan struct{}
	err  error
}

// wait waits for the read to end, or for ctx to: the read's error, or
// ctx's.
func (f *flight) wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

const (
	// readTimeout bounds each read (every stage of it: they run at once)
	// after init. Three GetSecretValue calls in a region answer in tens of
	// milliseconds; the SDK's retries of a throttle fit too. A hanging
	// Secrets Manager costs the callers waiting for the read this long,
	// once per backoff step, and the read gives up.
	readTimeout = 3 * time.Second
	// recheckInterval is the most often a refused signature makes the keys
	// be read again in one process (see Source.Recheck).
	recheckInterval = 5 * time.Second
	// failedBackoffBase and failedBackoffMax make failedBackoff.
	failedBackoffBase = time.Second
	failedBackoffMax  = 8 * time.Second
	// NoRefresh, as a refresh interval, reads a value once (until a read
	// succeeds) and never again: the downstream URL.
	NoRefresh time.Duration = -1
)

// failedBackoff is how long after the n-th failed read in a row (n ≥ 1)
// the next one is tried: 1 s, 2 s, 4 s, then 8 s.
func failedBackoff(n int) time.Duration {
	d := failedBackoffBase
	for i := 1; i < n && d < failedBackoffMax; i++ {
		d *= 2
	}
	return min(d, failedBackoffMax)
}

func newCache[T any](refresh time.Duration, read func(context.Context) (T, error)) cache[T] {
	if refresh == 0 {
		refresh = DefaultRefresh
	}
	return cache[T]{read: read, refresh: refresh, now: time.Now}
}

// stale reports whether the value held must be read again (c.mu held).
func (c *cache[T]) stale() bool {
	return !c.loaded || (c.refresh > 0 && c.now().Sub(c.readAt) >= c.refresh)
}

// start begins a read (c.mu held, no read in flight) that runs with
// timeout, detached from ctx's cancellation and deadline but keeping its
// values (the request id a log line carries).
func (c *cache[T]) start(ctx context.Context, timeout time.Duration, explicit bool) *flight {
	c.begun++
	f := &flight{n: c.begun, done: make(chan struct{})}
	c.flight = f
	quiet := explicit && !c.loaded
	go c.run(context.WithoutCancel(ctx), timeout, f, quiet)
	return f
}

// run is one read's goroutine.
func (c *cache[T]) run(ctx context.Context, timeout time.Duration, f *flight, quiet bool) {
	began := time.Now()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var v T
	err := errors.New("the read did not finish")
	func() {
		// A panic in the read (a bug in a library it calls) would end the
		// process from this goroutine, where nobody can recover it: it is a
		// failed read instead, and the next read is tried by the rule.
		defer func() {
			if p := recover(); p != nil {
				err = idem.Transient(fmt.Errorf("the read panicked: %v", p))
			}
		}()
		v, err = c.read(rctx)
	}()
	c.mu.Lock()
	held := c.loaded
	if err == nil {
		if f.n > c.held {
			c.value, c.loaded, c.readAt, c.held = v, true, c.now(), f.n
		}
		c.failures, c.lastErr, c.retryAt = 0, nil, time.Time{}
	} else {
		c.failures++
		c.lastErr = err
		c.retryAt = c.now().Add(failedBackoff(c.failures))
	}
	retryIn := failedBackoff(c.failures)
	f.err = err
	c.flight = nil
	c.mu.Unlock()
	if err != nil && !quiet && c.failed != nil {
		c.failed(ctx, err, time.Since(began), retryIn, held)
	}
	// Closed last: a waiter finds the value stored and the failure counted.
	close(f.done)
}

// wait waits for f within ctx and returns the value held then. It is an
// error only while no value is held: the read's error, or ctx's, both
// transient for the caller (the value may come with the next read).
func (c *cache[T]) wait(ctx context.Context, f *flight) (T, error) {
	err := f.wait(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		return c.value, nil
	}
	return c.value, notYet(err)
}

// notYet is the error of a caller that finds no value held.
func notYet(err error) error {
	return idem.Transient(fmt.Errorf("not read yet: %w", err))
}

// get returns the value, reading it first if it is stale (sharing the
// read in flight, if any).
func (c *cache[T]) get(ctx context.Context) (T, error) {
	c.mu.Lock()
	if !c.stale() {
		v := c.value
		c.mu.Unlock()
		return v, nil
	}
	f := c.flight
	if f == nil {
		if c.now().Before(c.retryAt) {
			// The last read failed a moment ago: not again yet.
			v, loaded, err := c.value, c.loaded, c.lastErr
			c.mu.Unlock()
			if loaded {
				return v, nil
			}
			return v, notYet(err)
		}
		f = c.start(ctx, readTimeout, false)
	}
	c.mu.Unlock()
	return c.wait(ctx, f)
}

// reload reads the value now (after the read in flight, if any: that one
// began before the call) and returns the one held when it was called and
// the one held after it, or the read's error. The read runs with
// readTimeout, or until ctx's deadline if that is later (init's budget).
func (c *cache[T]) reload(ctx context.Context) (prev, next T, err error) {
	timeout := readTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(timeout, time.Until(d))
	}
	c.mu.Lock()
	prev = c.value
	for c.flight != nil {
		f := c.flight
		c.mu.Unlock()
		// That read's own error does not matter: this call reads after it.
		if f.wait(ctx) != nil && ctx.Err() != nil {
			return prev, prev, ctx.Err()
		}
		c.mu.Lock()
	}
	f := c.start(ctx, timeout, true)
	c.mu.Unlock()
	err = f.wait(ctx)
	c.mu.Lock()
	next = c.value
	c.mu.Unlock()
	return prev, next, err
}

// Why a recheck had no read begun after its mark. Both are transient for
// the refusal that asked: whether the secret rotated is unknown.
var (
	errRecheckSuppressed = errors.New("the keys were re-read for a refused signature less than " + recheckInterval.String() + " ago")
	errRecheckOlder      = errors.New("a read of the keys begun before the refused request was sent is still running")
)

// readsBegun returns the number of reads begun so far: a mark for recheck.
func (c *cache[T]) readsBegun() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begun
}

// recheck returns the value of a read begun after mark (numbered above
// it): one that already succeeded, the one in flight, or a new one, at
// most one new one per recheckInterval. It is an error when there is no
// such read, or it failed.
func (c *cache[T]) recheck(ctx context.Context, mark uint64) (T, error) {
	c.mu.Lock()
	if c.loaded && c.held > mark {
		v := c.value
		c.mu.Unlock()
		return v, nil
	}
	f := c.flight
	switch {
	case f != nil && f.n <= mark:
		// Shared with an older read: it may have read before a rotation.
		v := c.value
		c.mu.Unlock()
		return v, errRecheckOlder
	case f == nil && !c.recheckAt.IsZero() && c.now().Sub(c.recheckAt) < recheckInterval:
		v := c.value
		c.mu.Unlock()
		return v, errRecheckSuppressed
	case f == nil:
		c.recheckAt = c.now()
		f = c.start(ctx, readTimeout, false)
	}
	c.mu.Unlock()
	err := f.wait(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.held < f.n {
		// Cannot happen (a successful read's value is held unless a later
		// one's is); defended all the same: no evidence, no verdict.
		err = errRecheckOlder
	}
	return c.value, err
}

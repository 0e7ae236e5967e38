package secretsource

import (
	"context"
	"errors"
	"sync"
	"time"
)

// cache holds the last value read and the refresh rule Source and Document
// share: read at init (Source.Reload, Document.Load), again when older than
// refresh by one caller at a time (with a short timeout) while the others
// keep the value they have, and after a failed re-read not again for
// retryFailedRefresh. Once read, a value stays in use through any failed
// re-read.
//
// Under Lambda Managed Instances one cache serves every invocation of the
// process at once, so reads overlap (a refresh, and a Reload): the value
// held is always that of the read that began last among those that
// succeeded, never an older read's that finished later (it may hold the
// value from before a rotation). A panic in a refresh's read leaves the
// refresh free for the next caller.
type cache[T any] struct {
	read    func(ctx context.Context) (T, error)
	refresh time.Duration
	now     func() time.Time
	// failed, if set, hears of every failed re-read (a read after a value
	// was loaded), outside the lock: its error, how long the read ran and
	// how long until a refresh tries again.
	failed func(ctx context.Context, err error, took, retryIn time.Duration)

	mu         sync.Mutex
	value      T
	loaded     bool
	readAt     time.Time
	refreshing bool
	// begun numbers the reads as they start; held is the number of the
	// read whose value is held.
	begun, held uint64
}

func newCache[T any](refresh time.Duration, read func(context.Context) (T, error)) cache[T] {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return cache[T]{read: read, refresh: refresh, now: time.Now}
}

// get returns the value, re-reading it first if it is stale and no other
// caller is doing so.
func (c *cache[T]) get(ctx context.Context) (T, error) {
	c.mu.Lock()
	value, loaded := c.value, c.loaded
	refresh := loaded && !c.refreshing && c.now().Sub(c.readAt) >= c.refresh
	if refresh {
		c.refreshing = true
	}
	c.mu.Unlock()
	if !loaded {
		// Never read (no read at init, or it failed): read now.
		_, v, err := c.reload(ctx)
		return v, err
	}
	if !refresh {
		return value, nil
	}
	return c.refreshNow(ctx), nil
}

// refreshNow re-reads the value for get, which marked the refresh as
// running, and returns the value held after it.
func (c *cache[T]) refreshNow(ctx context.Context) (held T) {
	err := errors.New("the refresh did not finish")
	defer func() {
		// Deferred, so that a panic in the read (recovered further up, as
		// the engine recovers a panicking action) cannot leave the mark
		// set: no later caller in the process would read again.
		c.mu.Lock()
		defer c.mu.Unlock()
		c.refreshing = false
		if err != nil {
			// Keep the value; try again in a while, not on every caller.
			c.readAt = c.now().Add(retryFailedRefresh - c.refresh)
		}
		held = c.value
	}()
	// Within the caller's own deadline too: a slow refresh must not push
	// the request it serves past its time.
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	_, _, err = c.reload(rctx)
	return held
}

// reload reads the value now and returns the one held when it was called
// and the one held after it. A failed read keeps the value held, and so
// does a read that an overlapping read begun later has overtaken.
func (c *cache[T]) reload(ctx context.Context) (prev, next T, err error) {
	c.mu.Lock()
	c.begun++
	n := c.begun
	prev = c.value
	c.mu.Unlock()
	began := time.Now()
	next, err = c.read(ctx)
	c.mu.Lock()
	reread := c.loaded
	if err == nil {
		if n > c.held {
			c.value, c.loaded, c.readAt, c.held = next, true, c.now(), n
		}
		next = c.value
	}
	c.mu.Unlock()
	if err != nil && reread && c.failed != nil {
		c.failed(ctx, err, time.Since(began), retryFailedRefresh)
	}
	return prev, next, err
}

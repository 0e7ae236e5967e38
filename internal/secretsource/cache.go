package secretsource

import (
	"context"
	"sync"
	"time"
)

// cache holds the last value read and the refresh rule Source and Document
// share: read at Load, again when older than refresh by one caller at a
// time (with a short timeout) while the others keep the value they have,
// and after a failed re-read not again for retryFailedRefresh. Once read,
// a value stays in use through any failed re-read.
type cache[T any] struct {
	read    func(ctx context.Context) (T, error)
	refresh time.Duration
	now     func() time.Time
	// failed, if set, hears of every failed re-read (a read after a value
	// was loaded), outside the lock.
	failed func(ctx context.Context, err error)

	mu         sync.Mutex
	value      T
	loaded     bool
	readAt     time.Time
	refreshing bool
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
		// Never read (Load was not called, or failed): read now.
		_, v, err := c.reload(ctx)
		return v, err
	}
	if !refresh {
		return value, nil
	}
	// Within the caller's own deadline too: a slow refresh must not push
	// the request it serves past its time.
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	_, v, err := c.reload(rctx)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		// Keep the value; try again in a while, not on every caller.
		c.readAt = c.now().Add(retryFailedRefresh - c.refresh)
		return c.value, nil
	}
	return v, nil
}

// reload reads the value now and returns the one it replaces. A failed
// read keeps the value held.
func (c *cache[T]) reload(ctx context.Context) (prev, next T, err error) {
	next, err = c.read(ctx)
	c.mu.Lock()
	reread := c.loaded
	if err == nil {
		prev = c.value
		c.value, c.loaded, c.readAt = next, true, c.now()
	}
	c.mu.Unlock()
	if err != nil && reread && c.failed != nil {
		c.failed(ctx, err)
	}
	return prev, next, err
}

package secretsource

import (
	"context"
	"sync"
	"time"
)

// cache holds the last value read and the refresh rule Source and Document
// share: read at Load, again when older than refresh by one caller at a
// time (with a short timeout) while the others keep the value they have,
// and after a failed re-read not again for retryFailedRefresh.
type cache[T any] struct {
	read    func(ctx context.Context) (T, error)
	refresh time.Duration
	now     func() time.Time
	// failed, if set, hears of a failed re-read (the old value stays).
	failed func(error)

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
	c.refreshing = false
	if err != nil {
		// Keep the value; try again in a while, not on every caller.
		c.readAt = c.now().Add(retryFailedRefresh - c.refresh)
		v = c.value
	}
	c.mu.Unlock()
	if err != nil && c.failed != nil {
		c.failed(err)
	}
	return v, nil
}

// reload reads the value now and returns the one it replaces.
func (c *cache[T]) reload(ctx context.Context) (prev, next T, err error) {
	next, err = c.read(ctx)
	if err != nil {
		return prev, next, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev = c.value
	c.value, c.loaded, c.readAt = next, true, c.now()
	return prev, next, nil
}

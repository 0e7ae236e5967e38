package secretsource

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// Document holds one secret's AWSCURRENT value, parsed into a T, and keeps
// it fresh by the rule Source keeps keys by: read at Load, again after the
// refresh interval (one read at a time, shared by every caller, with its
// own timeout); until a read succeeds, Get's error is transient. A value
// that no longer parses, or a failed read, keeps the last good value (and
// OnRefreshError hears of it, and of a failed read before any value). It
// is safe for concurrent use.
//
// The secret is read at its AWSCURRENT stage only: a document rotates
// inside its value (the inbound sources list several secrets per sender),
// not by staging labels.
type Document[T any] struct {
	api   API
	id    string
	parse func(string) (T, error)
	cache cache[T]

	mu      sync.Mutex
	failed  int
	onError func(error)
}

// NewDocument returns a Document for the secret id (a name or an ARN),
// parsed by parse, re-read after refresh (zero means DefaultRefresh,
// NoRefresh never once a value is read). The
// parse error must not quote the value; it is wrapped with the secret's id.
// Call Load before use.
func NewDocument[T any](api API, id string, refresh time.Duration, parse func(string) (T, error)) *Document[T] {
	d := &Document[T]{api: api, id: id, parse: parse}
	d.cache = newCache(refresh, d.read)
	d.cache.failed = func(_ context.Context, err error, _, _ time.Duration, _ bool) {
		d.mu.Lock()
		d.failed++
		f := d.onError
		d.mu.Unlock()
		if f != nil {
			f(err)
		}
	}
	return d
}

// OnRefreshError sets f to hear of every failed re-read (the last good value
// stays in use). Set it before use.
func (d *Document[T]) OnRefreshError(f func(error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onError = f
}

// TakeCounts returns the failed re-reads since the last call (in
// RefreshFailed; a document has no versions to ignore) and starts again.
func (d *Document[T]) TakeCounts() Counts {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := Counts{RefreshFailed: d.failed}
	d.failed = 0
	return c
}

// Load reads and parses the value now. Use it at init, with the init's
// budget as ctx's deadline: its error names the secret and what is wrong
// (missing, denied, not parseable), without the value; idem.Classify tells
// an outage (transient: Get reads again) from a misconfiguration.
func (d *Document[T]) Load(ctx context.Context) error {
	_, _, err := d.cache.reload(ctx)
	return err
}

// Get returns the parsed value, refreshed when stale (see Source.Keys).
func (d *Document[T]) Get(ctx context.Context) (T, error) { return d.cache.get(ctx) }

func (d *Document[T]) read(ctx context.Context) (T, error) {
	var zero T
	value, err := readString(ctx, d.api, d.id, StageCurrent)
	if err != nil {
		return zero, err
	}
	v, err := d.parse(value)
	if err != nil {
		return zero, idem.Permanent(fmt.Errorf("secret %s: %w", d.id, err))
	}
	return v, nil
}

//go:build e2efaults

package main

// Built only with -tags e2efaults, for internal/e2e's managed-instances
// test: the store panics when it reserves a key with a part starting with
// "panic-" (an SQS event whose id does, "evt:panic-…:notify", or an API
// request whose Idempotency-Key does, "api:…:panic-…"), as a bug in a
// record's processing would, outside the action. The deployed bootstrap
// never contains this file.

import (
	"context"
	"strings"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
)

func init() {
	wrapStore = func(s *ddbstore.Store) idem.Store { return panickyStore{s} }
}

// panickyStore is the real store, but for Reserve on a ":panic-" key.
type panickyStore struct{ *ddbstore.Store }

func (s panickyStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if strings.Contains(r.Key, ":panic-") {
		panic("e2efaults: a bug while reserving " + r.Key)
	}
	return s.Store.Reserve(ctx, r)
}

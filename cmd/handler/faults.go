//go:build e2efaults

package main

// Built only with -tags e2efaults, for internal/e2e's managed-instances
// and exit tests. The deployed bootstrap never contains this file.
//   - The store panics when it reserves a key with a part starting with
//     "panic-" (an SQS event whose id does, "evt:panic-…:notify", or an API
//     request whose Idempotency-Key does, "api:…:panic-…"), as a bug in a
//     record's processing would, outside the action.
//   - The action ignores its context for a key with a part starting with
//     "ignore-ctx-": it sleeps for the event's "ignore_ms" milliseconds
//     whatever its context says, as a library call that ignores its
//     context would, then runs the real action on a context that was never
//     cancelled (the downstream gets a late POST).
//   - E2E_MAX_ABANDONED, when set, replaces the bound of abandoned actions
//     past which the process exits between invocations.

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
)

func init() {
	wrapStore = func(s *dynamostore.Store) idem.Store { return panickyStore{s} }
	wrapAction = ignoringAction
	if n, err := strconv.Atoi(os.Getenv("E2E_MAX_ABANDONED")); err == nil {
		boundAbandoned = func() int { return n }
	}
}

// panickyStore is the real store, but for Reserve on a ":panic-" key.
type panickyStore struct{ *dynamostore.Store }

func (s panickyStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	if strings.Contains(r.Key, ":panic-") {
		panic("e2efaults: a bug while reserving " + r.Key)
	}
	return s.Store.Reserve(ctx, r)
}

// ignoringAction is do, but for an event whose key has an "ignore-ctx-"
// part: that one ignores its context for the event's ignore_ms first.
func ignoringAction(do action.Func) action.Func {
	return func(ctx context.Context, ev action.Event) (action.Result, error) {
		if !strings.Contains(ev.Key, ":ignore-ctx-") {
			return do(ctx, ev)
		}
		var b struct {
			IgnoreMS int `json:"ignore_ms"`
		}
		_ = json.Unmarshal(ev.Body, &b)
		time.Sleep(time.Duration(b.IgnoreMS) * time.Millisecond)
		return do(context.WithoutCancel(ctx), ev)
	}
}

package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// names are effects for effectStore: items to create, each on the
// condition that it is new.
type names []string

func (n names) Len() int { return len(n) }

// effectStore is an in-memory EffectStore (the real one is DynamoDB's,
// checked by the public storetest suite); fail, when set, is the error its
// next commits return.
type effectStore struct {
	*memstore.Store
	mu      sync.Mutex
	items   map[string]int
	fail    []error
	commits int
}

func (s *effectStore) CompleteWithEffects(ctx context.Context, f idem.Finish, eff idem.Effects) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return err
	}
	for _, n := range eff.(names) {
		if s.items[n] > 0 {
			return idem.PermanentCode(idem.CodeEffectConditionFailed, errors.New(n+" exists"))
		}
	}
	if err := s.Store.Complete(ctx, f); err != nil {
		return err
	}
	for _, n := range eff.(names) {
		s.items[n]++
	}
	return nil
}

func work(effects idem.Effects) idem.Work {
	return func(context.Context) ([]byte, idem.Effects, error) { return []byte(`{"entry":"e1"}`), effects, nil }
}

func TestEffectsCommitWithTheCompletion(t *testing.T) {
	s := &effectStore{Store: memstore.New(), items: map[string]int{}}
	f := newFixture(t, func(o *idem.Options) { o.Store = s })
	r := req(t, "evt:ledger-1:ledger", `{}`)
	for i := range 2 {
		out := f.engine.DoWork(context.Background(), r, work(names{"entry-1"}))
		if out.Err != nil || !out.Stored {
			t.Fatalf("delivery %d: %+v", i+1, out)
		}
	}
	if s.items["entry-1"] != 1 || s.commits != 1 {
		t.Errorf("entry written %d times in %d commits; want once (the duplicate replays)", s.items["entry-1"], s.commits)
	}
}

func TestEffectConditionFailureIsAStoredBusinessFailure(t *testing.T) {
	s := &effectStore{Store: memstore.New(), items: map[string]int{"entry-2": 1}}
	f := newFixture(t, func(o *idem.Options) { o.Store = s })
	r := req(t, "evt:ledger-2:ledger", `{}`)
	out := f.engine.DoWork(context.Background(), r, work(names{"entry-2"}))
	if outCode(out) != idem.CodeEffectConditionFailed || !out.Stored {
		t.Fatalf("got %+v; want a stored %s", out, idem.CodeEffectConditionFailed)
	}
	if again := f.engine.DoWork(context.Background(), r, work(names{"entry-2"})); !again.Replayed || outCode(again) != idem.CodeEffectConditionFailed {
		t.Errorf("redelivery %+v; want the failure replayed", again)
	}
}

func TestEffectsNeedAStoreThatCommitsThem(t *testing.T) {
	f := newFixture(t) // memstore: no EffectStore
	out := f.engine.DoWork(context.Background(), req(t, "evt:ledger-3:ledger", `{}`), work(names{"x"}))
	if outCode(out) != idem.CodeInvalidEffects || !out.Stored {
		t.Fatalf("got %+v; want a stored %s", out, idem.CodeInvalidEffects)
	}
}

// A commit whose outcome is unknown is repeated (the store makes that
// safe); one that keeps failing leaves the record for the next delivery.
func TestEffectCommitRetriedThenReleasedToTheLease(t *testing.T) {
	throttled := idem.Transient(errors.New("throttled"))
	s := &effectStore{Store: memstore.New(), items: map[string]int{}, fail: []error{idem.OutcomeUnknown(errors.New("reset")), throttled}}
	f := newFixture(t, func(o *idem.Options) { o.Store = s })
	out := f.engine.DoWork(context.Background(), req(t, "evt:ledger-4:ledger", `{}`), work(names{"entry-4"}))
	if out.Err != nil || s.commits != 3 || s.items["entry-4"] != 1 {
		t.Fatalf("got %+v after %d commits; want success on the third", out, s.commits)
	}
	s2 := &effectStore{Store: memstore.New(), items: map[string]int{}, fail: []error{throttled, throttled, throttled}}
	g := newFixture(t, func(o *idem.Options) { o.Store = s2 })
	out = g.engine.DoWork(context.Background(), req(t, "evt:ledger-5:ledger", `{}`), work(names{"entry-5"}))
	if outCode(out) != idem.CodeStoreUnavailable || out.Stored || s2.items["entry-5"] != 0 {
		t.Fatalf("got %+v; want STORE_UNAVAILABLE with nothing applied", out)
	}
}

// outCode is the code of out's error, or "" when there is none.
func outCode(out idem.Outcome) idem.Code {
	if out.Err == nil {
		return ""
	}
	return out.Err.Code
}

package sqsbatch_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

// New names each missing thing, and Wrap panics with the same words (a
// wiring mistake, found at init).
func TestNewNamesWhatIsMissingAndWrapPanicsTheSame(t *testing.T) {
	quiet := oncely.Options{Logger: slog.New(slog.DiscardHandler)}
	engine, err := oncely.New(oncelytest.NewStore(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	// A store that keeps records but no poison notes.
	bare, err := oncely.New(struct{ driver.Store }{oncelytest.NewStore()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	dec := sqsbatch.JSON(orderKey)
	work := func(context.Context, order) ([]byte, oncely.Effects, error) { return nil, nil, nil }
	fn := func(context.Context, order) error { return nil }
	for _, tc := range []struct {
		name   string
		engine *oncely.Engine
		dec    sqsbatch.Decoder[order]
		nilFn  bool
		o      sqsbatch.Options
		want   string
	}{
		{"no engine", nil, dec, false, sqsbatch.Options{}, "an engine is required"},
		{"no decoder", engine, nil, false, sqsbatch.Options{}, "a decoder is required"},
		{"no function", engine, dec, true, sqsbatch.Options{}, "a function is required"},
		{"a store without poison notes, no Options.Poison", bare, dec, false, sqsbatch.Options{}, "Options.Poison is required"},
		{"Backoff without its SQS client", engine, dec, false, sqsbatch.Options{Backoff: &sqsbatch.Backoff{}}, "Options.Backoff.SQS is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := work
			if tc.nilFn {
				w = nil
			}
			h, err := sqsbatch.New(tc.engine, tc.dec, w, tc.o)
			if err == nil || h != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, %v; want an error saying %q", h, err, tc.want)
			}
			f := fn
			if tc.nilFn {
				f = nil
			}
			got := panicOf(func() { sqsbatch.Wrap(tc.engine, tc.dec, f, tc.o) })
			if !strings.Contains(got, tc.want) {
				t.Errorf("Wrap panicked with %q; want %q", got, tc.want)
			}
		})
	}
	// The bare store works once Options.Poison says where notes go.
	if _, err := sqsbatch.New(bare, dec, work, sqsbatch.Options{Poison: oncelytest.NewStore()}); err != nil {
		t.Errorf("New with Options.Poison over a store without notes: %v; want it accepted", err)
	}
	// The decoders refuse their own missing parts.
	if got := panicOf(func() { sqsbatch.JSON[order](nil) }); !strings.Contains(got, "key function is required") {
		t.Errorf("JSON(nil) panicked with %q; want it to name the key function", got)
	}
	if got := panicOf(func() { sqsbatch.Expr(nil) }); !strings.Contains(got, "extractor is required") {
		t.Errorf("Expr(nil) panicked with %q; want it to name the extractor", got)
	}
}

// panicOf returns what fn panicked with, or "" if it returned.
func panicOf(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return ""
}

// A Handler built by New stores the function's result with the record
// (replayed for the next copy, which does not run), and hands the
// function's effects to the store, to commit with the completion.
func TestNewStoresTheResultAndCommitsTheEffects(t *testing.T) {
	store := &effectStore{Store: oncelytest.NewStore()}
	engine, err := oncely.New(store, oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h, err := sqsbatch.New(engine, sqsbatch.JSON(orderKey), func(ctx context.Context, o order) ([]byte, oncely.Effects, error) {
		runs++
		return []byte(`{"charged":42}`), ledger{"debit " + o.ID}, nil
	}, sqsbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, label := range []string{"executed", "replayed"} {
		resp, results, err := h.Handle(context.Background(), batch(false, rec{id: fmt.Sprint("m", i), body: body("fx-00001", "")}))
		if err != nil || len(resp.BatchItemFailures) != 0 || string(results[0].Label) != label {
			t.Fatalf("delivery %d: %+v, %v; want %s, acknowledged", i, results, err, label)
		}
	}
	stored, ok, err := store.Get(context.Background(), "order:fx-00001", time.Now())
	if err != nil || !ok || stored.Status != driver.StatusSucceeded || !bytes.Equal(stored.Result, []byte(`{"charged":42}`)) {
		t.Errorf("record %+v (%v, %v); want SUCCEEDED with the function's result", stored, ok, err)
	}
	if got := store.appliedEffects(); runs != 1 || !slices.Equal(got, []string{"debit fx-00001"}) {
		t.Errorf("runs %d, effects applied %v; want 1 run and its one effect, once", runs, got)
	}
}

// The in-memory store cannot commit effects: a function that returns some
// there gets a stored permanent failure (INVALID_EFFECTS), never a success
// whose writes were dropped.
func TestEffectsOnAStoreThatCannotCommitThemAreAStoredFailure(t *testing.T) {
	f := newFixture(t, func(s *setup) {
		s.work = func(context.Context, order) ([]byte, oncely.Effects, error) {
			return []byte(`{}`), ledger{"debit"}, nil
		}
	})
	_, results := f.run(t, batch(false, rec{id: "m1", body: body("ie-00001", "")}))
	if r := results[0]; r.Label != "permanent" || r.Code != oncely.CodeInvalidEffects || !r.Ack() {
		t.Errorf("result %+v; want permanent INVALID_EFFECTS", r)
	}
	if rec, ok, _ := f.store.Get(context.Background(), "order:ie-00001", f.clock.Now()); !ok || rec.Status != driver.StatusFailed || rec.ErrorCode != oncely.CodeInvalidEffects {
		t.Errorf("record %+v; want FAILED INVALID_EFFECTS", rec)
	}
}

// ledger are effects the effectStore knows: lines of a ledger.
type ledger []string

func (l ledger) Len() int { return len(l) }

// effectStore is the in-memory store with CompleteWithEffects: it applies
// the ledger lines and the completion under one lock, or neither (the
// in-memory store has no effects of its own; DynamoDB's store is the real
// one, tested in dynamostore).
type effectStore struct {
	*oncelytest.Store
	mu      sync.Mutex
	applied []string
}

var _ driver.EffectStore = (*effectStore)(nil)

func (s *effectStore) CompleteWithEffects(ctx context.Context, f driver.Finish, eff driver.Effects) error {
	l, ok := eff.(ledger)
	if !ok {
		return driver.PermanentCode(driver.CodeInvalidEffects, fmt.Errorf("effects of type %T", eff))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Complete(ctx, f); err != nil {
		return err
	}
	s.applied = append(s.applied, l...)
	return nil
}

func (s *effectStore) appliedEffects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied)
}

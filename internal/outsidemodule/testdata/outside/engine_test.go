package outside_test

import (
	"context"
	"testing"
	"time"

	"example.com/outside"
	"example.com/outside/mapstore"
	"github.com/oncely/oncely"
)

func newEngine(t *testing.T, s *mapstore.Store) *oncely.Engine {
	t.Helper()
	e, err := oncely.New(s, oncely.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func request(t *testing.T, key, payload string) oncely.Request {
	t.Helper()
	r, err := oncely.NewRequest(key, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Work that returns effects has them committed by the outside store's
// CompleteWithEffects, with the record; a replay applies nothing again.
func TestEngineCommitsEffectsThroughTheOutsideStore(t *testing.T) {
	s := mapstore.New()
	e := newEngine(t, s)
	req := request(t, "ledger:entry-1001", `{"cents":500}`)
	runs := 0
	work := func(context.Context) ([]byte, oncely.Effects, error) {
		runs++
		return []byte(`{"entry":"e-1001"}`), mapstore.Writes{{Item: "ledger/e-1001", Value: "500", If: mapstore.IfAbsent}}, nil
	}
	out := e.Run(context.Background(), req, work)
	if out.Err != nil || out.Status != oncely.StatusSucceeded || !out.Stored {
		t.Fatalf("first run: %+v; want SUCCEEDED and stored", out)
	}
	if v, ok := s.Item("ledger/e-1001"); !ok || v != "500" {
		t.Fatalf("item %q, exists %v; want the effect applied", v, ok)
	}
	again := e.Run(context.Background(), req, work)
	if again.Err != nil || !again.Replayed || string(again.Result) != `{"entry":"e-1001"}` || runs != 1 {
		t.Errorf("second run: %+v after %d runs; want the stored result replayed and 1 run", again, runs)
	}
}

// An effect whose condition fails applies nothing and is stored as a
// permanent EFFECT_CONDITION_FAILED.
func TestEngineStoresAFailedEffectConditionAsPermanent(t *testing.T) {
	s := mapstore.New()
	e := newEngine(t, s)
	write := func(value string) oncely.Work {
		return func(context.Context) ([]byte, oncely.Effects, error) {
			return []byte(`{}`), mapstore.Writes{{Item: "ledger/e-2002", Value: value, If: mapstore.IfAbsent}}, nil
		}
	}
	if out := e.Run(context.Background(), request(t, "ledger:entry-2002:a", `1`), write("first")); out.Err != nil {
		t.Fatal(out.Err)
	}
	out := e.Run(context.Background(), request(t, "ledger:entry-2002:b", `1`), write("second"))
	if out.Err == nil || out.Err.Code != oncely.CodeEffectConditionFailed || out.Err.Retryable || out.Status != oncely.StatusFailed {
		t.Fatalf("a write onto an existing item: %+v; want a stored permanent EFFECT_CONDITION_FAILED", out)
	}
	if v, _ := s.Item("ledger/e-2002"); v != "first" {
		t.Errorf("item %q; want the first write's, untouched", v)
	}
}

// The module's own handler notes a message that cannot be an event in the
// outside store's PoisonRecorder, and runs the rest once.
func TestHandlerNotesPoisonInTheOutsideStore(t *testing.T) {
	s := mapstore.New()
	charges := 0
	h := &outside.Handler{Engine: newEngine(t, s), Poison: s, Now: time.Now,
		Charge: func(context.Context, int) (string, error) { charges++; return "ch_1", nil }}
	ctx := context.Background()
	for _, m := range []outside.Message{
		{ID: "m-1", Body: []byte(`{"order_id":"3003","cents":250}`)},
		{ID: "m-2", Body: []byte(`{"order_id":"3003","cents":250}`)}, // the same order, redelivered
		{ID: "m-3", Body: []byte(`{"order_id":"a:b","cents":250}`)},
		{ID: "m-4", Body: []byte(`not json`)},
	} {
		if err := h.Handle(ctx, m); err != nil {
			t.Fatalf("%s: %v; want it acknowledged", m.ID, err)
		}
	}
	if charges != 1 {
		t.Errorf("%d charges; want 1", charges)
	}
	for id, reason := range map[string]oncely.Code{"m-3": oncely.CodeInvalidKey, "m-4": oncely.CodeInvalidPayload} {
		p, ok, err := s.GetPoison(ctx, id, time.Now())
		if err != nil || !ok || p.Reason != reason || p.BodySize == 0 {
			t.Errorf("poison note %s: %+v, found %v, err %v; want one with reason %s", id, p, ok, err, reason)
		}
	}
	if _, ok, _ := s.GetPoison(ctx, "m-1", time.Now()); ok {
		t.Errorf("a good message has a poison note")
	}
}

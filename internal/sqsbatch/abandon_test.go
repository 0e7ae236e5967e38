package sqsbatch_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsbatch"
)

// TestARecordWhoseActionIgnoresItsContextGoesBack: in a batch of three, the
// record whose action ignores its context is abandoned at its work
// deadline and goes back to the queue; the batch is answered before the
// invocation's deadline, with the other records' own outcomes.
func TestARecordWhoseActionIgnoresItsContextGoesBack(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	var engine *idem.Engine
	f := newFixture(t, func(o *sqsbatch.Options) {
		// Large reserves: seconds between the abandonment and the deadline.
		var err error
		engine, err = idem.New(idem.Options{Store: o.Poison.(idem.Store), Lease: time.Minute, Logger: slog.New(slog.DiscardHandler),
			Retry:  idem.RetryPolicy{AttemptsPerDelivery: 1},
			Budget: idem.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		o.Engine = engine
		o.Action = func(ctx context.Context, ev action.Event) (action.Result, error) {
			var b struct{ Reply string }
			_ = json.Unmarshal(ev.Body, &b)
			if b.Reply == "ignore-ctx" {
				<-release // ignores its context
				return action.Result{Body: []byte(`{"late":true}`)}, nil
			}
			return scripted(ctx, ev)
		}
	})
	deadline := time.Now().Add(6 * time.Second) // work deadline: 2 s from now
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Without abandonment the batch waits for the action: let it return
	// after the deadline, so that the test fails instead of hanging.
	stop := time.AfterFunc(time.Until(deadline)+time.Second, open)
	defer stop.Stop()
	resp, results, err := f.h.Handle(ctx, batch(false,
		rec{id: "m-hang", body: event("hang-00001", "ignore-ctx")},
		rec{id: "m-ok", body: event("ok-00001", "")},
		rec{id: "m-tr", body: event("tr-00001", "transient")}))
	if now := time.Now(); !now.Before(deadline) {
		t.Fatalf("answered %v after the invocation's deadline; want before it", now.Sub(deadline))
	}
	if err != nil {
		t.Fatal(err)
	}
	var back []string
	for _, fl := range resp.BatchItemFailures {
		back = append(back, fl.ItemIdentifier)
	}
	slices.Sort(back)
	if !slices.Equal(back, []string{"m-hang", "m-tr"}) {
		t.Errorf("batchItemFailures %v; want the abandoned record and the transient one", back)
	}
	labels := map[string]idem.Label{}
	for _, r := range results {
		labels[r.MessageID] = r.Label
	}
	if want := map[string]idem.Label{"m-hang": idem.LabelAbandoned, "m-ok": idem.LabelExecuted, "m-tr": idem.LabelTransient}; !maps.Equal(labels, want) {
		t.Errorf("labels %v; want %v", labels, want)
	}
	if f.vis.changes["m-hang"] <= 0 {
		t.Errorf("the abandoned record got no visibility delay; want one")
	}
	if !strings.Contains(f.logs.String(), `"outcome":"abandoned"`) {
		t.Errorf("no record line says outcome abandoned")
	}
	stop.Stop()
	open()
	for limit := time.Now().Add(10 * time.Second); engine.Abandoned() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the abandoned action's late return was never recorded")
		}
	}
}

package sqsbatch_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

// TestAFunctionThatIgnoresItsContextGoesBack: in a batch of three, the
// message whose function ignores its context is abandoned at its work
// deadline and goes back to the queue (abandoned, with a visibility delay);
// the batch is answered without waiting for it, with the other messages'
// own outcomes; the function's late return is still accounted for.
func TestAFunctionThatIgnoresItsContextGoesBack(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	logs := &syncBuffer{}
	// Large reserves: seconds between the abandonment and the deadline.
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Retry:  oncely.RetryPolicy{AttemptsPerDelivery: 1},
		Budget: oncely.Budget{StoreReserve: 2 * time.Second, RespondReserve: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	sqsAPI := newFakeSQS()
	h, err := sqsbatch.New(engine, sqsbatch.JSON(orderKey), func(ctx context.Context, o order) ([]byte, oncely.Effects, error) {
		switch o.Reply {
		case "ignore-ctx":
			<-release // ignores its context
			return []byte(`{"late":true}`), nil, nil
		case "transient":
			return nil, nil, oncely.Transient(context.DeadlineExceeded)
		}
		return []byte(`{}`), nil, nil
	}, sqsbatch.Options{Backoff: &sqsbatch.Backoff{SQS: sqsAPI}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(6 * time.Second) // work deadline: 2 s from now
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Without abandonment the batch would wait for the function: let it
	// return after the deadline, so that the test fails instead of hanging.
	stop := time.AfterFunc(time.Until(deadline)+time.Second, open)
	defer stop.Stop()
	resp, results, err := h.Handle(ctx, batch(false,
		rec{id: "m-hang", body: body("hang-00001", "ignore-ctx")},
		rec{id: "m-ok", body: body("ok-00001", "")},
		rec{id: "m-tr", body: body("tr-00001", "transient")}))
	if err != nil {
		t.Fatal(err)
	}
	back := failures(resp)
	slices.Sort(back)
	if !slices.Equal(back, []string{"m-hang", "m-tr"}) {
		t.Errorf("batchItemFailures %v; want the abandoned message and the transient one", back)
	}
	r := byID(results)
	if r["m-hang"].Label != "abandoned" || r["m-ok"].Label != "executed" || r["m-tr"].Label != "transient" {
		t.Errorf("labels %s %s %s; want abandoned, executed, transient", r["m-hang"].Label, r["m-ok"].Label, r["m-tr"].Label)
	}
	if d, ok := sqsAPI.requested("rh-m-hang"); !ok || d <= 0 {
		t.Errorf("the abandoned message got no visibility delay (%v, %v); want one", d, ok)
	}
	if !strings.Contains(logs.String(), `"outcome":"abandoned"`) {
		t.Errorf("no record line says outcome abandoned")
	}
	stop.Stop()
	open()
	for limit := time.Now().Add(20 * time.Second); engine.Abandoned() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the abandoned function's late return was never accounted for")
		}
	}
}

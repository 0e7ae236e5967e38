package sqsbatch_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/testing/sqslocal"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

// Against moto's SQS (skipped without it; make test starts it): a message
// received for an hour that fails transiently comes back after the
// backoff's 1 s, because Backoff changed its visibility through the SDK's
// client.
func TestBackoffChangesTheVisibilityOnSQS(t *testing.T) {
	client := sqslocal.Client(sqslocal.Endpoint(t))
	q := sqslocal.NewScratch(t, client, false, nil)
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sqsbatch.New(engine, sqsbatch.JSON(orderKey), func(context.Context, order) ([]byte, oncely.Effects, error) {
		return nil, nil, oncely.TransientNextDelivery(context.DeadlineExceeded)
	}, sqsbatch.Options{Backoff: &sqsbatch.Backoff{SQS: client, Base: time.Second, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	id := q.Send(t, body("moto-0001", ""), "")
	recs := q.Receive(t, 1, 3600)
	if len(recs) != 1 {
		t.Fatalf("received %d messages; want 1", len(recs))
	}
	resp, results, err := h.Handle(context.Background(), events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; len(resp.BatchItemFailures) != 1 || r.Label != "transient" || r.Visibility != time.Second || r.VisibilityErr != nil {
		t.Fatalf("result %+v; want transient, 1 s requested and applied", r)
	}
	var again []string
	for limit := time.Now().Add(30 * time.Second); len(again) == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(limit) {
			t.Fatal("the message did not come back: its visibility (an hour) was not changed")
		}
		for _, m := range q.Receive(t, 1, 3600) {
			again = append(again, m.MessageId)
		}
	}
	if again[0] != id {
		t.Fatalf("received %v; want %s back", again, id)
	}
}

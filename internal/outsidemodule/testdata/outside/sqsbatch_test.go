package outside_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"example.com/outside/mapstore"
	"github.com/oncely/oncely"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

type orderEvent struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

func orderKey(o orderEvent) (string, error) { return oncely.Key("charge", o.OrderID) }

func sqsMessages(bodies ...string) events.SQSEvent {
	var ev events.SQSEvent
	for i, b := range bodies {
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: "m" + string(rune('1'+i)), Body: b,
			EventSource: "aws:sqs", EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:orders"})
	}
	return ev
}

// The public SQS adapter over this module's own store and event type: two
// copies of an order in one batch charge once, and a body that is not an
// order is noted in the store and acknowledged.
func TestSQSBatchFromOutside(t *testing.T) {
	s := mapstore.New()
	var charges atomic.Int32
	handler := sqsbatch.Wrap(newEngine(t, s), sqsbatch.JSON(orderKey), func(ctx context.Context, o orderEvent) error {
		charges.Add(1)
		return nil
	}, sqsbatch.Options{})
	order := `{"order_id":"o-1","cents":500}`
	resp, err := handler(context.Background(), sqsMessages(order, order, `{"order_id":`))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("response %+v, %v; want every message acknowledged", resp, err)
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times; want once", n)
	}
	if note, ok, _ := s.GetPoison(context.Background(), "m3", time.Now()); !ok || note.Reason != oncely.CodeInvalidPayload {
		t.Errorf("poison note %+v, found %v; want INVALID_PAYLOAD", note, ok)
	}
}

// A configuration-driven key (keyexpr) through the same adapter.
func TestSQSBatchWithKeyExpressionsFromOutside(t *testing.T) {
	x, err := keyexpr.New("['charge', order_id]", "")
	if err != nil {
		t.Fatal(err)
	}
	var charges atomic.Int32
	handler := sqsbatch.Wrap(newEngine(t, mapstore.New()), sqsbatch.Expr(x), func(ctx context.Context, body json.RawMessage) error {
		charges.Add(1)
		return nil
	}, sqsbatch.Options{})
	order := `{"order_id":"o-2","cents":700}`
	for range 2 {
		if resp, err := handler(context.Background(), sqsMessages(order)); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("response %+v, %v; want the message acknowledged", resp, err)
		}
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("charged %d times over two deliveries; want once", n)
	}
}

package sqsvisibility_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// countingTransport counts HTTP requests to the server.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

func TestClientAgainstMoto(t *testing.T) {
	ep := sqslocal.Endpoint(t)
	ct := &countingTransport{}
	cfg := ddblocal.Config(ep, ct)
	client := sqs.NewFromConfig(cfg)
	q := sqslocal.NewScratch(t, client, false, nil)
	for i := range 12 {
		q.Send(t, fmt.Sprintf(`{"n":%d}`, i), "")
	}
	var msgs []events.SQSMessage
	for len(msgs) < 12 {
		got := q.Receive(t, 10, 1)
		if len(got) == 0 {
			t.Fatalf("received %d of 12 messages", len(msgs))
		}
		msgs = append(msgs, got...)
	}
	changes := make([]sqsvisibility.Change, 0, len(msgs)+1)
	for _, m := range msgs {
		changes = append(changes, sqsvisibility.Change{QueueARN: q.ARN, MessageID: m.MessageId, ReceiptHandle: m.ReceiptHandle, Timeout: 600 * time.Second})
	}
	changes = append(changes, sqsvisibility.Change{QueueARN: q.ARN, MessageID: "bogus", ReceiptHandle: "not-a-receipt-handle", Timeout: time.Minute})
	ct.n.Store(0)
	failed := sqsvisibility.New(client).ChangeVisibility(context.Background(), changes)
	if n := ct.n.Load(); n != 2 {
		t.Errorf("requests %d; want 2 (13 changes in batches of 10)", n)
	}
	if len(failed) != 1 || failed["bogus"] == nil {
		t.Fatalf("failed %v; want only the bogus receipt handle", failed)
	}
	if c := idem.Classify(failed["bogus"]); c != idem.ClassPermanent {
		t.Errorf("a bad receipt handle is %v; want permanent (the sender's fault)", c)
	}
	// The 1 s visibility of the receive has passed; the 600 s one holds.
	time.Sleep(1100 * time.Millisecond)
	if n := len(q.Receive(t, 10, 30)); n != 0 {
		t.Errorf("%d messages visible after the change; want 0 (hidden for 600 s)", n)
	}
	zero := []sqsvisibility.Change{{QueueARN: q.ARN, MessageID: msgs[0].MessageId, ReceiptHandle: msgs[0].ReceiptHandle, Timeout: 0}}
	if failed := sqsvisibility.New(client).ChangeVisibility(context.Background(), zero); len(failed) != 0 {
		t.Fatalf("visibility 0: %v", failed)
	}
	if n := len(q.Receive(t, 10, 30)); n != 1 {
		t.Errorf("%d messages visible after setting one to 0; want 1", n)
	}
}

func TestClientFailuresAreClassified(t *testing.T) {
	// Nothing listens on port 1: the request never leaves.
	client := sqs.NewFromConfig(ddblocal.Config("http://127.0.0.1:1", nil), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	failed := sqsvisibility.New(client).ChangeVisibility(context.Background(), []sqsvisibility.Change{
		{QueueARN: "arn:aws:sqs:us-east-1:123456789012:q", MessageID: "m1", ReceiptHandle: "h", Timeout: time.Second},
		{QueueARN: "arn:aws:sns:us-east-1:123456789012:t", MessageID: "m2", ReceiptHandle: "h", Timeout: time.Second},
	})
	if c := idem.Classify(failed["m1"]); c != idem.ClassTransient {
		t.Errorf("unreachable SQS: %v (%v); want transient", c, failed["m1"])
	}
	if c := idem.Classify(failed["m2"]); c != idem.ClassPermanent {
		t.Errorf("not a queue ARN: %v (%v); want permanent", c, failed["m2"])
	}
}

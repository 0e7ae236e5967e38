package sqsvisibility_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// countingTransport counts HTTP requests to the server.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// queue is a fresh queue on moto's SQS with n messages received once.
type queue struct {
	client *sqs.Client
	url    string
	arn    string
	msgs   []types.Message
}

func newQueue(t *testing.T, client *sqs.Client, n int) *queue {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("vis-" + hex.EncodeToString(b[:]))})
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{client: client, url: *out.QueueUrl}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	q.arn = attrs.Attributes["QueueArn"]
	for i := range n {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	for len(q.msgs) < n {
		got, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: out.QueueUrl, MaxNumberOfMessages: 10, VisibilityTimeout: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Messages) == 0 {
			t.Fatalf("received %d of %d messages", len(q.msgs), n)
		}
		q.msgs = append(q.msgs, got.Messages...)
	}
	return q
}

func (q *queue) visible(t *testing.T) int {
	t.Helper()
	out, err := q.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Messages)
}

func TestClientAgainstMoto(t *testing.T) {
	ep := ddblocal.MotoEndpoint(t)
	ct := &countingTransport{}
	cfg := ddblocal.Config(ep, ct)
	client := sqs.NewFromConfig(cfg)
	q := newQueue(t, client, 12)
	changes := make([]sqsvisibility.Change, 0, len(q.msgs)+1)
	for _, m := range q.msgs {
		changes = append(changes, sqsvisibility.Change{QueueARN: q.arn, MessageID: *m.MessageId, ReceiptHandle: *m.ReceiptHandle, Timeout: 600 * time.Second})
	}
	changes = append(changes, sqsvisibility.Change{QueueARN: q.arn, MessageID: "bogus", ReceiptHandle: "not-a-receipt-handle", Timeout: time.Minute})
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
	if n := q.visible(t); n != 0 {
		t.Errorf("%d messages visible after the change; want 0 (hidden for 600 s)", n)
	}
	zero := []sqsvisibility.Change{{QueueARN: q.arn, MessageID: *q.msgs[0].MessageId, ReceiptHandle: *q.msgs[0].ReceiptHandle, Timeout: 0}}
	if failed := sqsvisibility.New(client).ChangeVisibility(context.Background(), zero); len(failed) != 0 {
		t.Fatalf("visibility 0: %v", failed)
	}
	if n := q.visible(t); n != 1 {
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

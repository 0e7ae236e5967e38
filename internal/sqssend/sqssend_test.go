package sqssend_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqssend"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

func TestSendOnMoto(t *testing.T) {
	client := sqslocal.Client(sqslocal.Endpoint(t))
	q := sqslocal.NewScratch(t, client, false, nil)
	s := sqssend.New(client, q.URL)
	body := `{"oncely_inbound":1,"body":{"s":"é \ufffd"}}`
	id, err := s.Send(context.Background(), []byte(body), map[string]string{"oncely-proof": "v1,AAAA"})
	if err != nil || id == "" {
		t.Fatalf("Send: %q, %v; want a message id", id, err)
	}
	got := q.Receive(t, 10, 30)
	if len(got) != 1 || got[0].MessageId != id || got[0].Body != body {
		t.Fatalf("received %+v; want the one message, body as sent", got)
	}
	// The attribute arrives as a String attribute, beside the body.
	if a := got[0].MessageAttributes["oncely-proof"]; a.DataType != "String" || a.StringValue == nil || *a.StringValue != "v1,AAAA" {
		t.Errorf("message attribute oncely-proof: %+v; want the String v1,AAAA", a)
	}
}

func TestSendFailuresAreClassified(t *testing.T) {
	ep := sqslocal.Endpoint(t)
	client := sqslocal.Client(ep)
	ctx := context.Background()
	missing := sqssend.New(client, ep+"/123456789012/no-such-queue")
	if _, err := missing.Send(ctx, []byte("{}"), nil); idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "no-such-queue") {
		t.Errorf("a missing queue: %v (%v); want a permanent error naming it", err, idem.Classify(err))
	}
	q := sqslocal.NewScratch(t, client, false, nil)
	if _, err := sqssend.New(client, q.URL).Send(ctx, make([]byte, sqssend.MaxMessageBytes+1), nil); idem.Classify(err) != idem.ClassPermanent {
		t.Errorf("a body over 1 MiB: %v; want permanent, refused before sending", err)
	}
	unreachable := sqs.New(sqslocal.Client("http://127.0.0.1:1").Options(), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	if _, err := sqssend.New(unreachable, q.URL).Send(ctx, []byte("{}"), nil); idem.Classify(err) != idem.ClassTransient {
		t.Errorf("an unreachable SQS: %v (%v); want transient", err, idem.Classify(err))
	}
}

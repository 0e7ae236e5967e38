package sqslocal_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

func TestScale(t *testing.T) {
	for _, c := range []struct {
		scale sqslocal.Scale
		in    time.Duration
		secs  int
	}{
		{1, 210 * time.Second, 210},
		{10, 210 * time.Second, 21},
		{10, 5 * time.Second, 1},
		{10, 0, 0},
		{100, 30 * time.Second, 1},
	} {
		if got := c.scale.Seconds(c.in); got != c.secs {
			t.Errorf("Scale(%d).Seconds(%v) = %d; want %d", c.scale, c.in, got, c.secs)
		}
	}
}

const tpl = `
Resources:
  Src:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      VisibilityTimeout: 200
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dead.Arn, maxReceiveCount: 2}
  Dead:
    Type: AWS::SQS::Queue
    Properties: {FifoQueue: true}
`

// The template's queues, scaled; a message moves to the DLQ after
// maxReceiveCount receives, and Redrive brings it back with a new id.
func TestCreatePairAndRedrive(t *testing.T) {
	ctx := context.Background()
	client := sqslocal.Client(sqslocal.Endpoint(t))
	parsed, err := samtemplate.Parse([]byte(tpl))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sqslocal.CreatePair(ctx, client, parsed, "Src", "sqslocal-"+time.Now().Format("150405.000000")[7:], 100)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Source.FIFO || !p.DLQ.FIFO || p.Source.VisibilityTimeout != 2*time.Second || p.Source.MaxReceiveCount != 2 {
		t.Fatalf("pair %+v; want FIFO queues, visibility 200 s / 100 = 2 s, maxReceiveCount 2", p)
	}
	sent, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &p.Source.URL, MessageBody: aws.String("b1"),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &p.Source.URL})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1}[i < 2]; len(out.Messages) != want {
			t.Fatalf("receive %d got %d messages; want %d", i+1, len(out.Messages), want)
		}
		for _, m := range out.Messages {
			_, _ = client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &p.Source.URL, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		}
	}
	if d, _ := sqslocal.Count(ctx, client, p.DLQ.URL); d.Total() != 1 {
		t.Fatalf("DLQ holds %+v; want the message", d)
	}
	var seen []string
	moved, err := sqslocal.Redrive(ctx, client, p, func(m sqslocal.Moved) {
		// Still in the DLQ when before sees it.
		if d, _ := sqslocal.Count(ctx, client, p.DLQ.URL); d.Total() != 1 {
			t.Errorf("before saw %s with the DLQ holding %+v; want it still there", m.OldID, d)
		}
		seen = append(seen, m.OldID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != aws.ToString(sent.MessageId) {
		t.Errorf("before saw %v; want the message", seen)
	}
	if len(moved) != 1 || moved[0].OldID != aws.ToString(sent.MessageId) || moved[0].NewID == moved[0].OldID || moved[0].Body != "b1" {
		t.Fatalf("moved %+v; want b1 with a new id", moved)
	}
	if d, _ := sqslocal.Count(ctx, client, p.DLQ.URL); d.Total() != 0 {
		t.Errorf("DLQ holds %+v after the redrive; want nothing", d)
	}
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &p.Source.URL,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "b1" || out.Messages[0].Attributes["MessageGroupId"] != "g" {
		t.Fatalf("source after the redrive: %+v (%v); want b1 in group g", out, err)
	}
}

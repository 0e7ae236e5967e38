package sqslocal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Scratch is a queue made for one test, with the client to use it: send,
// receive, and turn what it receives into Lambda's event records, with
// their real receipt handles and attributes.
type Scratch struct {
	Client *sqs.Client
	URL    string
	ARN    string
	FIFO   bool
}

// NewScratch creates a uniquely named queue (FIFO when fifo), with attrs.
func NewScratch(t TB, client *sqs.Client, fifo bool, attrs map[string]string) *Scratch {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "q-" + hex.EncodeToString(b[:])
	all := map[string]string{}
	for k, v := range attrs {
		all[k] = v
	}
	if fifo {
		name += ".fifo"
		all["FifoQueue"] = "true"
	}
	ctx := context.Background()
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: all})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	got, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("queue attributes: %v", err)
	}
	return &Scratch{Client: client, URL: *out.QueueUrl, ARN: got.Attributes["QueueArn"], FIFO: fifo}
}

// Send sends body (with group as its FIFO message group and a unique
// deduplication id) and returns the message id.
func (q *Scratch) Send(t TB, body, group string) string {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: &body}
	if q.FIFO {
		var b [8]byte
		_, _ = rand.Read(b[:])
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(hex.EncodeToString(b[:]))
	}
	out, err := q.Client.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return *out.MessageId
}

// Receive receives up to max messages without waiting, hidden for
// visibility seconds, as the event records Lambda would pass.
func (q *Scratch) Receive(t TB, max, visibility int32) []events.SQSMessage {
	t.Helper()
	out, err := q.Client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &q.URL, MaxNumberOfMessages: max, VisibilityTimeout: visibility,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	recs := make([]events.SQSMessage, 0, len(out.Messages))
	for _, m := range out.Messages {
		recs = append(recs, q.Record(m))
	}
	return recs
}

// Record is m as Lambda's SQS event source passes it.
func (q *Scratch) Record(m types.Message) events.SQSMessage {
	region := "us-east-1"
	if parts := strings.Split(q.ARN, ":"); len(parts) == 6 {
		region = parts[3]
	}
	rec := events.SQSMessage{
		MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
		Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: q.ARN, AWSRegion: region,
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes), MessageAttributes: map[string]events.SQSMessageAttribute{},
	}
	for k, v := range m.MessageAttributes {
		rec.MessageAttributes[k] = events.SQSMessageAttribute{StringValue: v.StringValue, BinaryValue: v.BinaryValue,
			DataType: aws.ToString(v.DataType), StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues}
	}
	return rec
}

// Package sqslocal connects to the local SQS server (moto's, started by
// tools/with-moto.sh), creates queues with the settings of template.yaml
// scaled down in time, counts what a queue holds, and redrives a
// dead-letter queue by hand (moto has no StartMessageMoveTask: receive
// from the DLQ, send to the source, delete from the DLQ; on AWS a redriven
// message gets a new message id too).
//
// It is test support for the event-source-mapping runner, the demo and the
// soak; no shipped command links it.
package sqslocal

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sdkhttp"
)

// Environment variables the tests read.
const (
	// EnvEndpoint is the local SQS server's endpoint, set by
	// tools/with-moto.sh. When it is unset, the moto endpoint
	// (IDEM_TEST_MOTO_ENDPOINT) is used: moto serves SQS there too.
	EnvEndpoint = "IDEM_TEST_MOTO_SQS_ENDPOINT"
	envMoto     = "IDEM_TEST_MOTO_ENDPOINT"
	// EnvRequire makes a missing endpoint a failure, not a skip.
	EnvRequire = "IDEM_REQUIRE_MOTO"
)

// Region is the region queues are created and signed in. moto finds a
// queue's region from the request's signature, so every client of the
// queues (the function included) must sign for it.
const Region = "us-east-1"

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// EndpointFromEnv returns the local SQS endpoint, or "" if none is set.
func EndpointFromEnv() string {
	if ep := os.Getenv(EnvEndpoint); ep != "" {
		return ep
	}
	return os.Getenv(envMoto)
}

// Endpoint returns the local SQS endpoint; it skips the test when there is
// none, unless EnvRequire is set (as make test does).
func Endpoint(t TB) string {
	t.Helper()
	ep := EndpointFromEnv()
	if ep == "" {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%s is set but neither %s nor %s is: make test starts moto and sets them", EnvRequire, EnvEndpoint, envMoto)
		}
		t.Skipf("%s is not set; run through `make test` to start moto", EnvEndpoint)
	}
	return ep
}

// Client returns an SQS client for the server at endpoint, with dummy
// credentials, signing for Region. Its HTTP client hands the transport its
// own copy of each request body (sdkhttp): without it, on a busy machine,
// the SDK now and then sent again a call the server had answered (a second
// copy of a send; a receive that found nothing because the first attempt
// took the message). Each retry the SDK still makes is logged to stderr
// (shown when a test fails), with its error.
func Client(endpoint string) *sqs.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 64, 64
	return sqs.NewFromConfig(aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   sdkhttp.New(&http.Client{Transport: t}),
		Retryer:      func() aws.Retryer { return loggedRetryer{retry.NewStandard()} },
	})
}

// loggedRetryer is the SDK's standard retryer, saying when it retries.
type loggedRetryer struct{ aws.RetryerV2 }

func (r loggedRetryer) IsErrorRetryable(err error) bool {
	ok := r.RetryerV2.IsErrorRetryable(err)
	if ok {
		fmt.Fprintf(os.Stderr, "sqslocal: %s: the SDK sends an SQS call again after: %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
	}
	return ok
}

// Scale divides the template's times for a local run: a queue's
// visibility timeout, a function's timeout and a batching window. Zero or
// one leaves them as they are. SQS counts in whole seconds, so a scaled
// queue time is rounded up and is at least one second.
type Scale int

// Duration returns d scaled down.
func (s Scale) Duration(d time.Duration) time.Duration {
	if s <= 1 {
		return d
	}
	return d / time.Duration(s)
}

// Seconds returns d scaled down, in whole seconds, at least 1 (0 stays 0).
func (s Scale) Seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(s.Duration(d).Seconds())))
}

// Queue is one queue as created locally.
type Queue struct {
	ID   string // the template's logical id
	Name string
	URL  string
	ARN  string // as the server reports it (QueueArn)
	FIFO bool
	// VisibilityTimeout is the scaled timeout the queue was created with.
	VisibilityTimeout time.Duration
	// MaxReceiveCount is the redrive policy's; 0 without one.
	MaxReceiveCount int
}

// Pair is a source queue and its dead-letter queue.
type Pair struct {
	Source, DLQ Queue
}

// CreatePair creates the template's queue sourceID and its DLQ, named
// prefix-<logical id> (plus .fifo), with the template's FIFO setting,
// retention, maxReceiveCount and visibility timeout (scaled).
func CreatePair(ctx context.Context, client *sqs.Client, tpl *samtemplate.Template, sourceID, prefix string, scale Scale) (Pair, error) {
	src, ok := tpl.Queues[sourceID]
	if !ok {
		return Pair{}, fmt.Errorf("sqslocal: %s is not a queue of %s", sourceID, tpl.Path)
	}
	if src.DLQ == "" {
		return Pair{}, fmt.Errorf("sqslocal: %s has no RedrivePolicy in %s", sourceID, tpl.Path)
	}
	dlq, err := create(ctx, client, tpl.Queues[src.DLQ], prefix, scale, nil)
	if err != nil {
		return Pair{}, err
	}
	source, err := create(ctx, client, src, prefix, scale, &dlq)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Source: source, DLQ: dlq}, nil
}

func create(ctx context.Context, client *sqs.Client, q samtemplate.Queue, prefix string, scale Scale, dlq *Queue) (Queue, error) {
	out := Queue{ID: q.ID, Name: prefix + "-" + q.ID, FIFO: q.FIFO, VisibilityTimeout: time.Duration(scale.Seconds(q.VisibilityTimeout)) * time.Second}
	attrs := map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(scale.Seconds(q.VisibilityTimeout)),
		string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(q.Retention / time.Second)),
	}
	if q.FIFO {
		out.Name += ".fifo"
		attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
	}
	if dlq != nil {
		policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlq.ARN, "maxReceiveCount": q.MaxReceiveCount})
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
		out.MaxReceiveCount = q.MaxReceiveCount
	}
	if len(out.Name) > 80 {
		return out, fmt.Errorf("sqslocal: queue name %q is longer than SQS's 80 characters", out.Name)
	}
	created, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(out.Name), Attributes: attrs})
	if err != nil {
		return out, fmt.Errorf("sqslocal: create %s: %w", out.Name, err)
	}
	out.URL = aws.ToString(created.QueueUrl)
	got, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return out, fmt.Errorf("sqslocal: %s: QueueArn: %w", out.Name, err)
	}
	out.ARN = got.Attributes[string(types.QueueAttributeNameQueueArn)]
	return out, nil
}

// Depth is what a queue holds.
type Depth struct {
	Visible, InFlight, Delayed int
}

// Total is every message the queue holds.
func (d Depth) Total() int { return d.Visible + d.InFlight + d.Delayed }

// Count returns what the queue at url holds.
func Count(ctx context.Context, client *sqs.Client, url string) (Depth, error) {
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		return Depth{}, err
	}
	n := func(a types.QueueAttributeName) int { v, _ := strconv.Atoi(out.Attributes[string(a)]); return v }
	return Depth{
		Visible:  n(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}, nil
}

// Moved is one message a redrive moved.
type Moved struct {
	OldID, NewID string
	Body         string
	// ReceiveCount is the receive count the message had in the DLQ (moto
	// keeps the source queue's count when it moves a message).
	ReceiveCount int
}

// Redrive moves every message of p.DLQ back to p.Source: it receives from
// the DLQ until it is empty, sends each message (body, message attributes,
// and on FIFO its group, with the old message id as the new deduplication
// id) to the source queue, then deletes it from the DLQ. before, if not
// nil, sees each message (NewID empty) just before it is sent, while it is
// still in the DLQ. A message whose send fails stays in the DLQ (it
// reappears after the DLQ's visibility timeout, and the error is returned).
func Redrive(ctx context.Context, client *sqs.Client, p Pair, before func(Moved)) ([]Moved, error) {
	var moved []Moved
	for empty := 0; empty < 3; {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(p.DLQ.URL), MaxNumberOfMessages: 10, VisibilityTimeout: 60,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return moved, fmt.Errorf("sqslocal: redrive: receive from %s: %w", p.DLQ.Name, err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, m := range out.Messages {
			rc, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
			if before != nil {
				before(Moved{OldID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), ReceiveCount: rc})
			}
			in := &sqs.SendMessageInput{QueueUrl: aws.String(p.Source.URL), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
			if p.Source.FIFO {
				in.MessageGroupId = aws.String(m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)])
				in.MessageDeduplicationId = m.MessageId
			}
			sent, err := client.SendMessage(ctx, in)
			if err != nil {
				return moved, fmt.Errorf("sqslocal: redrive: send %s to %s: %w", aws.ToString(m.MessageId), p.Source.Name, err)
			}
			if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(p.DLQ.URL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return moved, fmt.Errorf("sqslocal: redrive: delete %s from %s (it was sent; it will be sent again): %w", aws.ToString(m.MessageId), p.DLQ.Name, err)
			}
			moved = append(moved, Moved{OldID: aws.ToString(m.MessageId), NewID: aws.ToString(sent.MessageId), Body: aws.ToString(m.Body), ReceiveCount: rc})
		}
	}
	return moved, nil
}

package sqsvisibility

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/awserr"
	"github.com/oncely/oncely/internal/idem"
)

// RequiredIAMActions are exactly the IAM actions the client calls (the
// batch call is authorised by the single-message action). The SAM template
// grants these on the source queues only; a test keeps them in step.
func RequiredIAMActions() []string { return []string{"sqs:ChangeMessageVisibility"} }

// maxBatch is SQS's limit of entries per ChangeMessageVisibilityBatch.
const maxBatch = 10

// Change is one message's new visibility timeout.
type Change struct {
	QueueARN      string // the record's eventSourceARN
	MessageID     string
	ReceiptHandle string
	Timeout       time.Duration // whole seconds, 0 to 12 hours
}

// Changer applies visibility changes. It returns the changes that failed,
// by message id, each with a classified error. A failure never changes a
// record's outcome: the message then returns at the queue's own timeout.
type Changer interface {
	ChangeVisibility(ctx context.Context, changes []Change) map[string]error
}

// API is the part of *sqs.Client the Client uses.
type API interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Client is a Changer over the SQS API: one ChangeMessageVisibilityBatch
// call per queue and ten messages. It has no endpoint logic (the SDK reads
// AWS_ENDPOINT_URL_SQS) and no retry loop of its own. It is safe for
// concurrent use (it keeps nothing between calls).
type Client struct{ api API }

// New returns a Client.
func New(api API) *Client { return &Client{api: api} }

// ChangeVisibility implements Changer.
func (c *Client) ChangeVisibility(ctx context.Context, changes []Change) map[string]error {
	failed := map[string]error{}
	byQueue := map[string][]Change{}
	var order []string
	for _, ch := range changes {
		url, err := QueueURL(ch.QueueARN)
		if err != nil {
			failed[ch.MessageID] = err
			continue
		}
		if _, ok := byQueue[url]; !ok {
			order = append(order, url)
		}
		byQueue[url] = append(byQueue[url], ch)
	}
	for _, url := range order {
		all := byQueue[url]
		for start := 0; start < len(all); start += maxBatch {
			batch := all[start:min(start+maxBatch, len(all))]
			c.send(ctx, url, batch, failed)
		}
	}
	return failed
}

func (c *Client) send(ctx context.Context, url string, batch []Change, failed map[string]error) {
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url)}
	for i, ch := range batch {
		// Entry ids are positions: message ids are not guaranteed to fit
		// the entry id's alphabet.
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(ch.ReceiptHandle),
			VisibilityTimeout: int32(ch.Timeout / time.Second),
		})
	}
	out, err := c.api.ChangeMessageVisibilityBatch(ctx, in)
	if err != nil {
		err = classify(url, err)
		for _, ch := range batch {
			failed[ch.MessageID] = err
		}
		return
	}
	// The call can succeed while entries fail: check each.
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(batch) {
			continue
		}
		// An entry's failure is SQS's error in all but type: awserr judges
		// it as it would the call's (a throttled entry, though SQS calls it
		// the sender's fault, is transient).
		fault := smithy.FaultServer
		if f.SenderFault {
			fault = smithy.FaultClient
		}
		api := &smithy.GenericAPIError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), Fault: fault}
		failed[batch[i].MessageID] = awserr.Mark(fmt.Errorf("sqs ChangeMessageVisibility on %s: %w", url, api))
	}
}

// classify marks a whole-call error as awserr does (a change that got
// no reply is marked sent; setting a timeout again is harmless), naming
// the queue and, for a refusal, what is missing: its code checks only
// choose that sentence.
func classify(url string, err error) error {
	wrap := fmt.Errorf("sqs ChangeMessageVisibilityBatch on %s: %w", url, err)
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "AccessDenied", "AccessDeniedException":
			wrap = fmt.Errorf("access to %s denied: the function's role needs %s on it: %w", url, RequiredIAMActions()[0], err)
		case "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "ExpiredToken", "ExpiredTokenException":
			wrap = fmt.Errorf("sqs refused the credentials for %s (%s): missing, invalid or expired: %w", url, api.ErrorCode(), err)
		}
	}
	return awserr.Mark(wrap)
}

// QueueURL returns the queue URL for a queue ARN
// (arn:<partition>:sqs:<region>:<account>:<name>). The SDK sends requests to
// its own endpoint; SQS finds the queue by the URL's account and name.
func QueueURL(arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return "", idem.Permanent(fmt.Errorf("sqs: %q is not a queue ARN (arn:aws:sqs:<region>:<account>:<name>)", arn))
	}
	suffix := "amazonaws.com"
	if parts[1] == "aws-cn" {
		suffix = "amazonaws.com.cn"
	}
	return fmt.Sprintf("https://sqs.%s.%s/%s/%s", parts[3], suffix, parts[4], parts[5]), nil
}

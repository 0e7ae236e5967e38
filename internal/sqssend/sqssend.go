// Package sqssend sends messages to one SQS queue: the receiving route
// (POST /webhooks/{source}) queues each verified delivery's envelope on the
// standard events queue with it. It is a driver: it classifies errors
// (permanent when a retry cannot help: a missing queue or permission, a
// message SQS refuses) and never retries (the SDK does). It has no
// endpoint logic: the SDK reads AWS_ENDPOINT_URL_SQS.
package sqssend

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/awserr"
	"github.com/oncely/oncely/internal/idem"
)

// MaxMessageBytes is the largest message body SQS accepts: 1 MiB (raised
// from 256 KiB in January 2026), counted in bytes of UTF-8.
const MaxMessageBytes = 1 << 20

// RequiredIAMActions are exactly the IAM actions the sender calls, on the
// one queue (the template grants these; a test keeps them in step).
func RequiredIAMActions() []string { return []string{"sqs:SendMessage"} }

// API is the part of *sqs.Client the Sender uses.
type API interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Sender sends to one standard queue. It is safe for concurrent use.
type Sender struct {
	api API
	url string
}

// New returns a Sender for the queue at url.
func New(api API, url string) *Sender { return &Sender{api: api, url: url} }

// Send sends body, with attributes as String message attributes (none if
// empty: the envelope's proof, inbound.ProofAttribute), and returns the
// message id SQS gave it. A body over MaxMessageBytes is refused before
// sending (permanent). SQS counts the attributes in the message's size;
// the proof's few hundred bytes are left out of the check here, and a
// message SQS refuses is a permanent error.
func (s *Sender) Send(ctx context.Context, body []byte, attributes map[string]string) (string, error) {
	if len(body) > MaxMessageBytes {
		return "", idem.Permanent(fmt.Errorf("sqs SendMessage to %s: the body is %d bytes; SQS accepts %d", s.url, len(body), MaxMessageBytes))
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(s.url), MessageBody: aws.String(string(body))}
	if len(attributes) > 0 {
		in.MessageAttributes = make(map[string]types.MessageAttributeValue, len(attributes))
		for name, v := range attributes {
			in.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	out, err := s.api.SendMessage(ctx, in)
	if err != nil {
		return "", s.classify(err)
	}
	return aws.ToString(out.MessageId), nil
}

// classify marks err as awserr does (the SDK's throttling, SQS's
// RequestThrottled among it, is transient; a missing queue, a message SQS
// refuses, refused credentials are permanent; a send that got no reply is
// marked sent: the envelope may be queued, and the consumer de-duplicates
// a second copy by its delivery id, so the sender's retry is safe). It
// names the queue and, for a denial, the permission: its code checks only
// choose that sentence.
func (s *Sender) classify(err error) error {
	wrap := fmt.Errorf("sqs SendMessage to %s: %w", s.url, err)
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "AccessDenied", "AccessDeniedException":
			wrap = fmt.Errorf("sending to %s denied: the function's role needs %s on it: %w", s.url, RequiredIAMActions()[0], err)
		case "KMS.AccessDeniedException", "KmsAccessDenied":
			wrap = fmt.Errorf("sending to %s: the role needs kms:GenerateDataKey on the queue's key: %w", s.url, err)
		}
	}
	return awserr.Mark(wrap)
}

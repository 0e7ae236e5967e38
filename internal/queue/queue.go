// Package queue is the ready function's queue path: the public sqsbatch
// adapter with the product's own decoder (inbound webhook envelopes, or
// the configured key and payload expressions) and its action.
package queue

import (
	"context"
	"encoding/json"
	"unsafe"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

// Handler is the queue path: the public sqsbatch adapter, with the
// product's decoder and its action.
type Handler = sqsbatch.Handler[action.Event]

// New returns the queue path for act, keyed by keys (and inbound
// envelopes by their own rule, see Decoder).
func New(e *oncely.Engine, keys *keyexpr.Extractor, act action.Func, o sqsbatch.Options) (*Handler, error) {
	return sqsbatch.New(e, Decoder(keys), func(ctx context.Context, ev action.Event) ([]byte, oncely.Effects, error) {
		return action.Work(act, ev)(ctx)
	}, o)
}

// Decoder is the ready function's decoder of queue messages. An inbound
// webhook's envelope (package inbound) has its own key and fingerprint,
// wh:<source>:<delivery-id> and the sender's stable fields, whatever the
// configured expressions say, and the action gets the sender's body; every
// other body goes through the expressions, and the action gets it whole.
func Decoder(keys *keyexpr.Extractor) sqsbatch.Decoder[action.Event] {
	return func(m events.SQSMessage) (oncely.Request, action.Event, error) {
		// The body's own bytes, not a copy (1 MiB per record otherwise):
		// the envelope's decode and the expressions only read them.
		body := unsafe.Slice(unsafe.StringData(m.Body), len(m.Body))
		if inbound.IsEnvelope(body) {
			env, err := inbound.DecodeEnvelope(body)
			if err != nil {
				return oncely.Request{}, action.Event{}, err
			}
			req, err := env.Request()
			if err != nil {
				return oncely.Request{}, action.Event{}, err
			}
			return oncely.Request(req), action.Event{Key: req.Key, Body: env.Body, Source: action.SourceWebhook, ID: m.MessageId,
				Inbound: &action.Inbound{Source: env.Source, Scheme: string(env.Scheme), DeliveryID: env.DeliveryID}}, nil
		}
		req, err := keys.Request(body)
		if err != nil {
			return oncely.Request{}, action.Event{}, err
		}
		return req, action.Event{Key: req.Key, Body: json.RawMessage(m.Body), Source: action.SourceSQS, ID: m.MessageId}, nil
	}
}

// Package queue is the ready function's queue path: the public sqsbatch
// adapter with the product's own decoder (inbound webhook envelopes, or
// the configured key and payload expressions) and its action.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

// Handler is the queue path: the public sqsbatch adapter, with the
// product's decoder and its action.
type Handler = sqsbatch.Handler[action.Event]

// New returns the queue path for act, keyed by keys (and inbound
// envelopes by their own rule, see Decoder). A GitHub delivery's record
// stored under its delivery id, before GitHub deliveries were keyed by
// their body, is consulted before act runs (see idKeyed).
func New(e *oncely.Engine, keys *keyexpr.Extractor, act action.Func, o sqsbatch.Options) (*Handler, error) {
	prior := idKeyed{e: engineref.Idem(e)}
	return sqsbatch.New(e, Decoder(keys), func(ctx context.Context, ev action.Event) ([]byte, oncely.Effects, error) {
		if result, err, settled := prior.settle(ctx, ev); settled {
			return result, nil, err
		}
		return action.Work(act, ev)(ctx)
	}, o)
}

// idKeyed keeps meaningful the records stored under a GitHub delivery's
// former key. A GitHub delivery is keyed by its body,
// wh:<source>:sha256:<digest> (inbound.BodyKey); before, it was keyed by
// its delivery id, wh:<source>:<delivery-id>, and a delivery received
// then may be redelivered (GitHub's Redeliver, a DLQ redrive, a replayed
// capture) within the retention. The decoder returns one request, the
// body's; so the work, once the engine has reserved the body's key and
// before the action runs, reads the record under the delivery id (one
// strongly consistent Get, paid only by a GitHub delivery whose body's key
// is new: a replay of the body's key is answered by its own record) and
// settles by it:
//
//	no record, or one for another body      run the action (another hook's or App's body under the event's id)
//	SUCCEEDED                               store its result, without running the action
//	FAILED for good (any code)              store the same failure, without running it
//	IN_PROGRESS or held, not yet claimable  transient: retried once that record's lease or hold-off ends
//	claimable (an owner died, a retryable   run the action, as the old key's next delivery would
//	failure past its hold-off)
//
// A read that fails is transient (the action has not run). The record
// under the id is never written: to run such a delivery again, an
// operator releases or forgets that record and then the body's (oncelyctl
// get --source S --delivery-id ID shows the first). Every record under a
// delivery id has expired once the retention has passed since the change;
// from then on the read finds nothing, and can be removed.
type idKeyed struct{ e *idem.Engine }

// settle returns what the work stores for ev without running the action
// (settled true), or settled false: run it.
func (p idKeyed) settle(ctx context.Context, ev action.Event) (result []byte, err error, settled bool) {
	in := ev.Inbound
	if p.e == nil || in == nil || !inbound.KeyedByBody(inbound.Scheme(in.Scheme)) || strings.HasPrefix(in.DeliveryID, inbound.BodyDigestPrefix) {
		// An id of the body key's own form was never one GitHub sent:
		// its "record under the id" would be a body's.
		return nil, nil, false
	}
	key, err := inbound.Key(in.Source, in.DeliveryID)
	if err != nil {
		return nil, nil, false // the decoder accepted it: cannot happen
	}
	now := p.e.Now()
	rec, found, err := p.e.Store().Get(ctx, key, now)
	if err != nil {
		return nil, idem.Transient(fmt.Errorf("reading the record under the delivery id, %s: %w", key, err)), true
	}
	if !found {
		return nil, nil, false
	}
	if fp, err := inbound.Fingerprint(inbound.Scheme(in.Scheme), ev.Body); err != nil || fp != rec.Fingerprint {
		return nil, nil, false // another body under the event's id
	}
	log := func(what string) {
		p.e.Logger().InfoContext(ctx, "inbound delivery settled by its record under the delivery id: "+what,
			"key", ev.Key, "id_key", key, "status", string(rec.Status), "code", string(rec.ErrorCode))
	}
	switch {
	case rec.Status == idem.StatusSucceeded:
		log("its result is stored; the action does not run")
		return rec.Result, nil, true
	case rec.Status == idem.StatusFailed && !rec.Retryable:
		log("its failure is stored; the action does not run")
		return nil, idem.PermanentCode(rec.ErrorCode, errors.New("the record under the delivery id "+key+" failed for good: "+string(rec.ErrorCode))), true
	case !rec.Claimable(now):
		log("it is busy; retried once it is not")
		return nil, idem.TransientAfter(errors.New("the record under the delivery id "+key+" is "+string(rec.Status)+" and not yet claimable"), rec.BusyUntil().Sub(now)), true
	}
	return nil, nil, false
}

// Decoder is the ready function's decoder of queue messages. An inbound
// webhook's envelope (package inbound) has its own key and fingerprint,
// wh:<source>:<delivery-id> (a GitHub delivery's: wh:<source>:sha256:<digest>
// of its body) and the sender's stable fields, whatever the
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

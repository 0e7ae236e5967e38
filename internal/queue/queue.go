// Package queue is the ready function's queue path: the public sqsbatch
// adapter with the product's own decoder (inbound webhook envelopes, or
// the configured key and payload expressions) and its action.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
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

// Proof is how the queue path tells an inbound envelope the receiving
// route queued from one anyone else sent to the queue: the route proves
// each envelope in its inbound.ProofAttribute message attribute, an
// HMAC-SHA256 of the message body with the proof secret's live keys.
//
//   - An envelope with a proof runs only if one of Keys' keys makes it
//     (a proof of other bytes, or with another key, is refused).
//   - An envelope without one runs only if no cutover is set (Since is
//     zero: unproved envelopes run, as before proofs existed) or SQS
//     received it (its SentTimestamp, which a redrive from the DLQ keeps)
//     before Since.
//
// A refused envelope is acknowledged with an ENVELOPE_UNPROVED poison
// note; its action never runs and no record of its key is touched.
type Proof struct {
	// Keys are the proof secret's live keys (INBOUND_PROOF_SECRET, a
	// *secretsource.Source). Nil: no proof can be checked, and the
	// attribute is ignored (every envelope is judged as unproved).
	Keys ProofKeys
	// Since is the cutover (INBOUND_PROOF_SINCE): an unproved envelope
	// sent at or after it is refused. Zero: none is.
	Since time.Time
}

// ProofKeys gives the proof secret's live keys (*secretsource.Source).
type ProofKeys interface {
	Keys(ctx context.Context) ([][]byte, error)
}

// Handler is the queue path: the public sqsbatch adapter, with the
// product's decoder and its action. It is safe for concurrent use.
type Handler struct {
	batch *sqsbatch.Handler[action.Event]
	proof Proof
	// keys are the proof keys the last batch that needed them read: the
	// decoder, which has no context, checks proofs with them.
	keys atomic.Pointer[[][]byte]
}

// New returns the queue path for act, keyed by keys (and inbound
// envelopes by their own rule, once proved by p, see Proof). A GitHub
// delivery's record stored under its delivery id, before GitHub deliveries
// were keyed by their body, is consulted before act runs (see idKeyed).
func New(e *oncely.Engine, keys *keyexpr.Extractor, act action.Func, o sqsbatch.Options, p Proof) (*Handler, error) {
	h := &Handler{proof: p}
	prior := idKeyed{e: engineref.Idem(e)}
	var err error
	h.batch, err = sqsbatch.New(e, h.decoder(keys), func(ctx context.Context, ev action.Event) ([]byte, oncely.Effects, error) {
		if result, err, settled := prior.settle(ctx, ev); settled {
			return result, nil, err
		}
		return action.Work(act, ev)(ctx)
	}, o)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Handle processes one batch (see sqsbatch.Handler.Handle). When a record
// carries an envelope proof, the proof keys are read first, within ctx
// (held keys are returned at once; a stale read is shared). Until a first
// read of them succeeds (Secrets Manager down since the cold start), such
// a batch fails whole and comes back: a proof that cannot be checked yet
// is not a forgery, and must not become a poison note.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, []sqsbatch.Result, error) {
	if h.proof.Keys != nil && anyProof(ev.Records) {
		keys, err := h.proof.Keys.Keys(ctx)
		if err != nil {
			return events.SQSEventResponse{}, nil, fmt.Errorf("queue: the envelope proof secret is not read yet, so the batch goes back: %w", err)
		}
		h.keys.Store(&keys)
	}
	return h.batch.Handle(ctx, ev)
}

// anyProof reports whether a record carries an envelope proof.
func anyProof(records []events.SQSMessage) bool {
	for _, m := range records {
		if _, ok := m.MessageAttributes[inbound.ProofAttribute]; ok {
			return true
		}
	}
	return false
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

// decoder is the ready function's decoder of queue messages. An inbound
// webhook's envelope (package inbound), once proved (see Proof), has its
// own key and fingerprint, wh:<source>:<delivery-id> (a GitHub
// delivery's: wh:<source>:sha256:<digest> of its body) and the sender's
// stable fields, whatever the configured expressions say, and the action
// gets the sender's body; every other body goes through the expressions,
// and the action gets it whole.
func (h *Handler) decoder(keys *keyexpr.Extractor) sqsbatch.Decoder[action.Event] {
	return func(m events.SQSMessage) (oncely.Request, action.Event, error) {
		// The body's own bytes, not a copy (1 MiB per record otherwise):
		// the proof, the envelope's decode and the expressions only read
		// them.
		body := unsafe.Slice(unsafe.StringData(m.Body), len(m.Body))
		if inbound.IsEnvelope(body) {
			// Proved before anything of it is believed: a forged envelope
			// must not reach the store under a genuine delivery's key.
			if err := h.prove(m, body); err != nil {
				return oncely.Request{}, action.Event{}, err
			}
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

// prove returns nil if the envelope m (whose body is body) may run, else
// an ENVELOPE_UNPROVED error that says why without quoting anything.
func (h *Handler) prove(m events.SQSMessage, body []byte) error {
	if h.proof.Keys != nil {
		if a, ok := m.MessageAttributes[inbound.ProofAttribute]; ok {
			// Handle read the keys before this batch (anyProof).
			if keys := h.keys.Load(); keys != nil && a.StringValue != nil && inbound.CheckProof(*keys, body, *a.StringValue) {
				return nil
			}
			return unproved("its " + inbound.ProofAttribute + " attribute does not prove these bytes with a live proof key: it was made with another key, or the body was changed after it was queued")
		}
	}
	if h.proof.Since.IsZero() {
		return nil // no cutover yet: envelopes run unproved, as before
	}
	ms, err := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	switch {
	case err != nil:
		return unproved("it has no proof, and no SentTimestamp to tell whether it was queued before INBOUND_PROOF_SINCE")
	case time.UnixMilli(ms).Before(h.proof.Since):
		return nil // queued before the cutover (a redrive keeps the time)
	}
	return unproved("it has no proof, and was queued at or after INBOUND_PROOF_SINCE (" + h.proof.Since.UTC().Format(time.RFC3339) + ")")
}

// Unproved reports whether the queue path refused a record as an
// unproved envelope (an ENVELOPE_UNPROVED poison note): what the
// envelope_unproved metric counts.
func Unproved(r sqsbatch.Result) bool {
	return r.Label == idem.LabelPoison && r.Code == idem.CodeEnvelopeUnproved
}

func unproved(why string) error {
	return &idem.Error{Code: idem.CodeEnvelopeUnproved, Message: "the inbound envelope is not proved to come from the receiving route: " + why}
}

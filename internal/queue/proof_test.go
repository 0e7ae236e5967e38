package queue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/sqssend"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// proofKeys are the proof secret's live keys, or err (a read that has not
// succeeded yet).
type proofKeys struct {
	keys [][]byte
	err  error
}

func (p proofKeys) Keys(context.Context) ([][]byte, error) { return p.keys, p.err }

var (
	liveKey   = []byte("envelope-proof-key-current-01")
	cutover   = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	liveProof = proofKeys{keys: [][]byte{liveKey}}
)

// schemeEnvelope is a genuine-looking envelope of each scheme (Stripe's
// delivery id is its body's event id).
func schemeEnvelope(scheme inbound.Scheme, body string) string {
	id := "d-" + string(scheme)
	if scheme == inbound.Stripe {
		id = "evt_forged"
		body = `{"id":"evt_forged","type":"invoice.paid","data":{"object":{"amount":4200}}}`
	}
	return envelope("src", scheme, id, body)
}

// record is an envelope as the queue function gets it: SentTimestamp sent,
// and the proof attribute when proof is not empty.
func record(id, body, proof string, sent time.Time) events.SQSMessage {
	m := events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: body, EventSource: "aws:sqs", EventSourceARN: arn,
		Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": strconv.FormatInt(sent.UnixMilli(), 10)}}
	if proof != "" {
		m.MessageAttributes = map[string]events.SQSMessageAttribute{inbound.ProofAttribute: {DataType: "String", StringValue: &proof}}
	}
	return m
}

// outcome handles one record and returns its result and its poison note's
// reason (if any).
func (f *fixture) outcome(t *testing.T, m events.SQSMessage) (idem.Label, idem.Code) {
	t.Helper()
	_, results, err := f.h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if results[0].Label == idem.LabelPoison {
		note, ok, _ := f.store.GetPoison(context.Background(), m.MessageId, time.Now())
		if !ok || note.Reason != results[0].Code {
			t.Fatalf("poison %s without its note: %+v, %v", results[0].Code, note, ok)
		}
	}
	return results[0].Label, results[0].Code
}

// After the cutover, a queue producer's envelope (no proof) is refused for
// every scheme, and no record of its key is written: the genuine delivery
// of the same id, proved by the route, then runs once.
func TestForgedEnvelopeIsRefusedForEachScheme(t *testing.T) {
	for _, scheme := range inbound.Schemes {
		t.Run(string(scheme), func(t *testing.T) {
			var s seen
			f := newFixture(t, func(o *fixtureOptions) {
				o.action, o.maxBody, o.proof = s.do, 1<<20, queue.Proof{Keys: liveProof, Since: cutover}
			})
			body := schemeEnvelope(scheme, `{"paid":true}`)
			if label, code := f.outcome(t, record("forged", body, "", cutover.Add(time.Minute))); label != idem.LabelPoison || code != idem.CodeEnvelopeUnproved {
				t.Fatalf("a producer's envelope after the cutover: %s %s; want poison ENVELOPE_UNPROVED", label, code)
			}
			if len(s.events) != 0 {
				t.Fatalf("the action ran for a forged envelope: %+v", s.events)
			}
			note, _, _ := f.store.GetPoison(context.Background(), "forged", time.Now())
			if strings.Contains(note.Detail, "paid") || strings.Contains(note.Detail, "evt_forged") {
				t.Errorf("note %q quotes the envelope", note.Detail)
			}
			// The genuine delivery (same bytes, proved) runs once, and its
			// copy is a replay.
			for i, want := range []idem.Label{idem.LabelExecuted, idem.LabelReplayed} {
				if label, code := f.outcome(t, record("genuine-"+strconv.Itoa(i), body, inbound.Prove([][]byte{liveKey}, []byte(body)), cutover.Add(time.Hour))); label != want {
					t.Fatalf("the proved envelope, copy %d: %s %s; want %s", i, label, code, want)
				}
			}
			if len(s.events) != 1 || s.events[0].Inbound == nil || s.events[0].Inbound.Scheme != string(scheme) {
				t.Errorf("the action's events %+v; want the genuine delivery once", s.events)
			}
		})
	}
}

// A proof covers the message's exact bytes, made with a live key: a body
// changed on the queue, a proof made with another key, a proof attribute
// that is not a proof, are refused, before and after the cutover alike.
func TestAlteredOrMisprovedEnvelopeIsRefused(t *testing.T) {
	orig := envelope("acme", inbound.StandardWebhooks, "msg_1", `{"amount":4200}`)
	altered := strings.Replace(orig, "4200", "9999", 1)
	for _, since := range []time.Time{{}, cutover} {
		for _, tt := range []struct {
			name, body, proof string
		}{
			{"body altered on the queue", altered, inbound.Prove([][]byte{liveKey}, []byte(orig))},
			{"another key", orig, inbound.Prove([][]byte{[]byte("a-key-the-producer-chose-0001")}, []byte(orig))},
			{"not a proof", orig, "v1,not-base64"},
		} {
			t.Run(tt.name+"/since="+since.Format(time.DateOnly), func(t *testing.T) {
				var s seen
				f := newFixture(t, func(o *fixtureOptions) { o.action, o.proof = s.do, queue.Proof{Keys: liveProof, Since: since} })
				if label, code := f.outcome(t, record("m1", tt.body, tt.proof, cutover.Add(time.Minute))); label != idem.LabelPoison || code != idem.CodeEnvelopeUnproved {
					t.Fatalf("got %s %s; want poison ENVELOPE_UNPROVED", label, code)
				}
				if len(s.events) != 0 {
					t.Errorf("the action ran: %+v", s.events)
				}
			})
		}
	}
}

// The route proves with every live key (current, pending, previous): a
// queue function holding any one of them accepts the envelope, so a
// rotation never refuses an envelope waiting in the queue or the DLQ while
// its key is still AWSPREVIOUS.
func TestProofSurvivesARotation(t *testing.T) {
	old, next := []byte("envelope-proof-key-old-00001"), []byte("envelope-proof-key-new-00001")
	body := envelope("acme", inbound.StandardWebhooks, "msg_r", `{"n":1}`)
	for _, tt := range []struct {
		name        string
		route, held [][]byte
	}{
		{"proved before the rotation, checked after it", [][]byte{old}, [][]byte{next, old}},
		{"route rotated, queue function not yet", [][]byte{next, old}, [][]byte{old}},
		{"queue function rotated, route not yet", [][]byte{old}, [][]byte{next, old}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(o *fixtureOptions) { o.proof = queue.Proof{Keys: proofKeys{keys: tt.held}, Since: cutover} })
			if label, code := f.outcome(t, record("m1", body, inbound.Prove(tt.route, []byte(body)), cutover.Add(time.Hour))); label != idem.LabelExecuted {
				t.Fatalf("got %s %s; want executed", label, code)
			}
		})
	}
	// Once its key is gone from every live stage, it is refused.
	f := newFixture(t, func(o *fixtureOptions) { o.proof = queue.Proof{Keys: proofKeys{keys: [][]byte{next}}, Since: cutover} })
	if label, code := f.outcome(t, record("m1", body, inbound.Prove([][]byte{old}, []byte(body)), cutover.Add(time.Hour))); code != idem.CodeEnvelopeUnproved {
		t.Errorf("a proof with a key no longer live: %s %s; want ENVELOPE_UNPROVED", label, code)
	}
}

// No genuine envelope is lost in either update order.
//
// Queue function first: with no cutover set, the old route's unproved
// envelopes run as before, and the new route's proved ones too. Route
// first: the old queue function reads the body only, and the proved
// envelope's body is the envelope as it always was (the proof is an
// attribute). After the cutover: an unproved envelope queued before it
// runs, and so does one redriven from the DLQ after it (SQS keeps the
// original SentTimestamp); one queued after it is refused.
func TestNoGenuineEnvelopeLostInEitherUpdateOrder(t *testing.T) {
	body := envelope("acme", inbound.StandardWebhooks, "msg_u", `{"n":1}`)
	proof := inbound.Prove([][]byte{liveKey}, []byte(body))
	t.Run("queue function first, no cutover yet", func(t *testing.T) {
		for _, m := range []events.SQSMessage{
			record("old-route", body, "", cutover.Add(time.Hour)), // from the old route
			record("new-route", strings.Replace(body, "msg_u", "msg_v", 1), inbound.Prove([][]byte{liveKey}, []byte(strings.Replace(body, "msg_u", "msg_v", 1))), cutover.Add(time.Hour)),
		} {
			f := newFixture(t, func(o *fixtureOptions) { o.proof = queue.Proof{Keys: liveProof} })
			if label, code := f.outcome(t, m); label != idem.LabelExecuted {
				t.Errorf("%s: %s %s; want executed", m.MessageId, label, code)
			}
		}
	})
	t.Run("route first: the old queue function ignores the attribute", func(t *testing.T) {
		// Today's decoder reads the body alone: it is the envelope, as
		// DecodeEnvelope has always read it.
		if env, err := inbound.DecodeEnvelope([]byte(body)); err != nil || env.DeliveryID != "msg_u" {
			t.Fatalf("DecodeEnvelope: %+v, %v", env, err)
		}
		// A queue function without a proof secret or a cutover (what an
		// old one's configuration gives) runs the proved envelope.
		f := newFixture(t)
		if label, code := f.outcome(t, record("m1", body, proof, cutover.Add(time.Hour))); label != idem.LabelExecuted {
			t.Errorf("got %s %s; want executed", label, code)
		}
	})
	t.Run("after the cutover", func(t *testing.T) {
		redriven := record("redriven", body, "", cutover.Add(-24*time.Hour)) // sent a day before, back from the DLQ
		redriven.Attributes["ApproximateReceiveCount"] = "9"
		for _, tt := range []struct {
			m     events.SQSMessage
			label idem.Label
			code  idem.Code
		}{
			{record("before", body, "", cutover.Add(-time.Millisecond)), idem.LabelExecuted, ""},
			{redriven, idem.LabelExecuted, ""},
			{record("at", body, "", cutover), idem.LabelPoison, idem.CodeEnvelopeUnproved},
			{record("after", body, "", cutover.Add(time.Hour)), idem.LabelPoison, idem.CodeEnvelopeUnproved},
			{record("proved", body, proof, cutover.Add(time.Hour)), idem.LabelExecuted, ""},
		} {
			f := newFixture(t, func(o *fixtureOptions) { o.proof = queue.Proof{Keys: liveProof, Since: cutover} })
			if label, code := f.outcome(t, tt.m); label != tt.label || code != tt.code {
				t.Errorf("%s: %s %s; want %s %s", tt.m.MessageId, label, code, tt.label, tt.code)
			}
		}
	})
	t.Run("ordinary events need no proof", func(t *testing.T) {
		f := newFixture(t, func(o *fixtureOptions) { o.proof = queue.Proof{Keys: liveProof, Since: cutover} })
		if label, code := f.outcome(t, record("ev", event("ok-00001", ""), "", cutover.Add(time.Hour))); label != idem.LabelExecuted {
			t.Errorf("an ordinary event after the cutover: %s %s; want executed", label, code)
		}
	})
}

// A proof that cannot be checked yet (the proof secret not read since the
// cold start) is no forgery: the batch goes back whole, nothing is noted.
func TestUncheckableProofSendsTheBatchBack(t *testing.T) {
	body := envelope("acme", inbound.StandardWebhooks, "msg_1", `{"n":1}`)
	f := newFixture(t, func(o *fixtureOptions) {
		o.proof = queue.Proof{Keys: proofKeys{err: idem.Transient(errors.New("secrets manager unavailable"))}, Since: cutover}
	})
	_, _, err := f.h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{record("m1", body, inbound.Prove([][]byte{liveKey}, []byte(body)), cutover)}})
	if err == nil {
		t.Fatal("Handle: no error; want the batch sent back")
	}
	if _, ok, _ := f.store.GetPoison(context.Background(), "m1", time.Now()); ok {
		t.Error("a poison note for an envelope whose proof could not be checked")
	}
}

// Through real SQS (moto): the route's sender puts the proof in a message
// attribute, which arrives with the body and SentTimestamp as the event
// source passes them; the envelope runs once, and a body sent with another
// body's proof is refused.
func TestProvedEnvelopeThroughSQS(t *testing.T) {
	client := sqslocal.Client(sqslocal.Endpoint(t))
	q := sqslocal.NewScratch(t, client, false, nil)
	send := sqssend.New(client, q.URL)
	body := envelope("acme", inbound.StandardWebhooks, "msg_sqs", `{"s":"é"}`)
	altered := strings.Replace(body, "é", "e", 1)
	for _, b := range []string{body, altered} {
		if _, err := send.Send(context.Background(), []byte(b), map[string]string{inbound.ProofAttribute: inbound.Prove([][]byte{liveKey}, []byte(body))}); err != nil {
			t.Fatal(err)
		}
	}
	recs := q.Receive(t, 10, 30)
	if len(recs) != 2 {
		t.Fatalf("received %d messages; want 2", len(recs))
	}
	var s seen
	f := newFixture(t, func(o *fixtureOptions) {
		o.action, o.proof = s.do, queue.Proof{Keys: liveProof, Since: time.Now().Add(-time.Hour)}
	})
	for _, m := range recs {
		want, code := idem.LabelExecuted, idem.Code("")
		if m.Body == altered {
			want, code = idem.LabelPoison, idem.CodeEnvelopeUnproved
		}
		if label, got := f.outcome(t, m); label != want || got != code {
			t.Errorf("%s: %s %s; want %s %s", m.Body, label, got, want, code)
		}
	}
	if len(s.events) != 1 {
		t.Errorf("the action ran %d times; want once", len(s.events))
	}
}

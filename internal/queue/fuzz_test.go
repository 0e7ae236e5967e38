package queue_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/keyexpr"
)

// canary is put into every fuzzed body: no poison note may ever quote it.
// It is hex, so no message template of ours can contain it by chance.
const canary = "c0ffee5eed5ca1ab1e"

// FuzzRecords sends arbitrary bodies and attributes through the adapter
// and checks the properties that must hold for any input:
//   - no panic, and an answer for every record (no empty identifiers);
//   - a message is acknowledged only when the store says what happened: a
//     stored success, a stored permanent failure, or a poison note;
//   - poison notes fit (bounded description), never quote the body, carry
//     a reason from idem.PoisonReasons and name the key if one was computed.
//
// Run longer with: go test -run '^$' -fuzz FuzzRecords ./internal/queue/
func FuzzRecords(f *testing.F) {
	seeds := []struct {
		body, receive, group string
		at                   int
	}{
		{`{"id":"release-42","action":"notify"}`, "1", "", 7},
		// Found by this target when join()'s error text reached the note
		// (odd length: the join() fixture; the canary lands in the id).
		{`{"id":"","action":null}`, "1", "", 7},
		{`{"id":{"card":"4111"},"action":"notify"}`, "2", "", 14},
		{`{"id":["a",{"b":1}],"action":"notify"}`, "x", "", 9},
		{`{"id":"a1-col","action":"x:notify"}`, "", "", 25},
		{`{"id":"abc-12345","action":"notify","reply":"transient"}`, "7", "g1", 20},
		{`{"id":"abc-12345","action":"notify","reply":"permanent"}`, "1", "g1", 0},
		{`{"id":"abc-12345","action":"notify","action":"notify"}`, "1", "", 3},
		{`{"id":"\ud800","action":"notify"}`, "1", "", 8},
		{"\xff\xfe{}", "1", "", 1},
		{`[1,2]`, "1", "", 1},
		{`"hello"`, "1", "", 3},
		{``, "", "", 0},
		{`{"id":"big","action":"notify","n":123456789012345678901234567890e999999}`, "1", "", 30},
		// Nesting and numbers: the deepest body accepted, one level deeper
		// (INVALID_PAYLOAD, before the key is read), and number forms the
		// fingerprint formats (-0.0, exponents, 1e400 is refused).
		{`{"id":"deep-1","action":"notify","x":` + strings.Repeat(`[{"a":`, 499) + `1` + strings.Repeat(`}]`, 499) + `}`, "1", "", 12},
		{`{"id":"deep-2","action":"notify","x":` + strings.Repeat(`[{"a":`, 500) + `1` + strings.Repeat(`}]`, 500) + `}`, "1", "", 12},
		{strings.Repeat(`[`, 1001) + strings.Repeat(`]`, 1001), "1", "", 500},
		{`{"id":"num-1","action":"notify","n":[-0.0,1E2,5e-324,1e21,0.1e1,9007199254740993]}`, "1", "", 9},
		{`{"id":"num-2","action":"notify","n":1e400}`, "1", "", 9},
		// Inbound envelopes: the canary in the delivery id, the sender's
		// body, the source's name; a Stripe envelope whose id then differs.
		{`{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"m1","body":{"a":"b"}}`, "1", "", 81},
		{`{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"m1","body":{"a":"b"}}`, "1", "", 97},
		{`{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"m1","body":{"a":"b"}}`, "1", "", 32},
		{`{"oncely_inbound":1,"source":"pay","scheme":"stripe","delivery_id":"evt_1","body":{"id":"evt_1","pending_webhooks":1}}`, "1", "", 93},
	}
	for _, s := range seeds {
		f.Add(s.body, s.receive, s.group, s.at)
	}
	joinKeys, _ := keyexpr.New("join(':', ['evt', id, action])", "")
	f.Fuzz(func(t *testing.T, body, receive, group string, at int) {
		// A fresh store per input, so that a note or record an earlier input
		// left cannot stand in for this one's. Odd lengths use the join()
		// form operators wrote before the list (its errors used to print the
		// values they were given).
		fx := newFixture(t)
		if len(body)%2 == 1 {
			fx = newFixture(t, func(o *fixtureOptions) { o.keys = joinKeys })
		}
		if at < 0 {
			at = -at
		}
		at %= len(body) + 1
		body = body[:at] + canary + body[at:]
		ev := events.SQSEvent{Records: []events.SQSMessage{
			{MessageId: "m-a", ReceiptHandle: "rh-a", Body: body, EventSource: "aws:sqs", EventSourceARN: arn,
				Attributes: map[string]string{"ApproximateReceiveCount": receive, "MessageGroupId": group}},
			// A second copy of the same body shares the first one's outcome.
			{MessageId: "m-b", ReceiptHandle: "rh-b", Body: body, EventSource: "aws:sqs", EventSourceARN: arn,
				Attributes: map[string]string{"ApproximateReceiveCount": receive, "MessageGroupId": group}},
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, results, err := fx.h.Handle(ctx, ev)
		if err != nil || len(results) != 2 {
			t.Fatalf("Handle = %v, %d results; want an answer per record", err, len(results))
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			if f.ItemIdentifier == "" {
				t.Fatalf("empty itemIdentifier in %+v", resp)
			}
			failed[f.ItemIdentifier] = true
		}
		for _, r := range results {
			if r.Ack() == failed[r.MessageID] {
				t.Errorf("%s: acknowledged %v but in batchItemFailures %v", r.MessageID, r.Ack(), failed[r.MessageID])
			}
			if !r.Ack() {
				continue
			}
			note, noted, _ := fx.store.GetPoison(context.Background(), r.MessageID, time.Now())
			switch r.Label {
			case idem.LabelPoison:
				if !noted {
					t.Fatalf("%s acknowledged as poison without a note", r.MessageID)
				}
				if len(note.Detail) > idem.MaxPoisonDetail || strings.Contains(note.Detail, canary[:9]) {
					t.Fatalf("note detail %q is too long or quotes the body", note.Detail)
				}
				if sum := sha256.Sum256([]byte(body)); note.BodySHA256 != hex.EncodeToString(sum[:]) || note.BodySize != len(body) {
					t.Fatalf("note %+v does not describe this body", note)
				}
				// Operators filter notes by reason against idem's list: a
				// reason outside it would be refused as unknown.
				if !slices.Contains(idem.PoisonReasons, note.Reason) {
					t.Fatalf("note reason %s is not in idem.PoisonReasons %v", note.Reason, idem.PoisonReasons)
				}
				if note.Key != r.Key {
					t.Fatalf("note names key %q, the record's result %q", note.Key, r.Key)
				}
			default:
				rec, found, _ := fx.store.Get(context.Background(), r.Key, time.Now())
				if !found || (rec.Status != idem.StatusSucceeded && (rec.Status != idem.StatusFailed || rec.Retryable)) {
					t.Fatalf("%s acknowledged (%s) but the record is %+v (found %v)", r.MessageID, r.Label, rec, found)
				}
				if req, err := requestOf(fx, []byte(body)); err != nil || req.Fingerprint != rec.Fingerprint || req.Key != r.Key {
					t.Fatalf("%s acknowledged under a record of another payload (%v)", r.MessageID, err)
				}
			}
		}
	})
}

// requestOf is the request a body must be recorded under: an inbound
// envelope's own, or the configured expressions'.
func requestOf(fx *fixture, body []byte) (idem.Request, error) {
	if !inbound.IsEnvelope(body) {
		r, err := fx.keys.Request(body)
		return idem.Request(r), err
	}
	env, err := inbound.DecodeEnvelope(body)
	if err != nil {
		return idem.Request{}, err
	}
	return env.Request()
}

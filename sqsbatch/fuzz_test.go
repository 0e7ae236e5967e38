package sqsbatch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/idem"
)

// canary is put into every fuzzed body: no poison note may ever quote it.
// It is hex, so no message template of ours can contain it by chance.
const canary = "c0ffee5eed5ca1ab1e"

// FuzzRecords sends arbitrary bodies and attributes through the adapter,
// with the JSON decoder (even-length bodies) or the Expr decoder
// (odd-length ones), and checks the properties that must hold for any
// input:
//   - no panic, and an answer for every record (no empty identifiers);
//   - a message is acknowledged only when the store says what happened: a
//     stored success, a stored permanent failure, under the request the
//     body gives, or a poison note;
//   - poison notes fit (bounded detail), never quote the body, carry a
//     reason from idem.PoisonReasons, describe this body (digest, size)
//     and name the key if one was computed.
//
// Run longer with: go test -run '^$' -fuzz FuzzRecords ./sqsbatch/
func FuzzRecords(f *testing.F) {
	seeds := []struct {
		body, receive, group string
		at                   int
	}{
		{`{"id":"release-42"}`, "1", "", 7},
		{`{"id":"release-42","action":"notify"}`, "1", "", 7},
		{`{"id":"","action":null}`, "1", "", 7},
		{`{"id":{"card":"4111"},"action":"notify"}`, "2", "", 14},
		{`{"id":["a",{"b":1}],"action":"notify"}`, "x", "", 9},
		{`{"id":"a1-col","action":"x:notify"}`, "", "", 25},
		{`{"id":"abc-12345","reply":"transient"}`, "7", "g1", 20},
		{`{"id":"abc-12345","action":"notify","reply":"transient"}`, "7", "g1", 20},
		{`{"id":"abc-12345","reply":"permanent"}`, "1", "g1", 0},
		{`{"id":"abc-12345","reply":"panic"}`, "1", "", 0},
		{`{"id":"abc-12345","reply":"sent"}`, "3", "", 0},
		{`{"id":"abc-12345","id":"abc-12346"}`, "1", "", 3},
		{`{"id":"abc-12345","amount":"12"}`, "1", "", 30},
		{`{"id":"abc-12345","amount":1e400}`, "1", "", 30},
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
	}
	for _, s := range seeds {
		f.Add(s.body, s.receive, s.group, s.at)
	}
	join := mustExpr(f, "join(':', ['evt', id, action])")
	f.Fuzz(func(t *testing.T, body, receive, group string, at int) {
		if at < 0 {
			at = -at
		}
		at %= len(body) + 1
		body = body[:at] + canary + body[at:]
		// A fresh store per input, so that a note or record an earlier input
		// left cannot stand in for this one's.
		fx := newFixture(t)
		if len(body)%2 == 1 {
			fx = newFixture(t, func(s *setup) { s.expr = join })
		}
		fifo := group != ""
		ev := batch(fifo, rec{id: "m-a", body: body, group: group}, rec{id: "m-b", body: body, group: group})
		for i := range ev.Records {
			ev.Records[i].Attributes["ApproximateReceiveCount"] = receive
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, results, err := fx.handle(ctx, ev)
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
			note, noted := fx.note(t, r.MessageID)
			if r.Label == "poison" {
				if !noted {
					t.Fatalf("%s acknowledged as poison without a note", r.MessageID)
				}
				if len(note.Detail) > driver.MaxPoisonDetail || strings.Contains(note.Detail, canary[:9]) {
					t.Fatalf("note detail %q is too long or quotes the body", note.Detail)
				}
				if sum := sha256.Sum256([]byte(body)); note.BodySHA256 != hex.EncodeToString(sum[:]) || note.BodySize != len(body) {
					t.Fatalf("note %+v does not describe this body", note)
				}
				if !slices.Contains(idem.PoisonReasons, note.Reason) {
					t.Fatalf("note reason %s is not in idem.PoisonReasons %v", note.Reason, idem.PoisonReasons)
				}
				if note.Key != r.Key {
					t.Fatalf("note names key %q, the record's result %q", note.Key, r.Key)
				}
				continue
			}
			stored, found, _ := fx.store.Get(context.Background(), r.Key, fx.clock.Now())
			if !found || (stored.Status != driver.StatusSucceeded && (stored.Status != driver.StatusFailed || stored.Retryable)) {
				t.Fatalf("%s acknowledged (%s) but the record is %+v (found %v)", r.MessageID, r.Label, stored, found)
			}
			if req, err := requestOf(fx, body); err != nil || req.Fingerprint != stored.Fingerprint || req.Key != r.Key {
				t.Fatalf("%s acknowledged under a record of another payload (%v)", r.MessageID, err)
			}
		}
	})
}

// requestOf is the request a body must be recorded under, computed apart
// from the decoders: the extractor's, or the order's key and the whole
// body's fingerprint.
func requestOf(fx *fixture, body string) (oncely.Request, error) {
	if fx.keys != nil {
		return fx.keys.Request([]byte(body))
	}
	var o order
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		return oncely.Request{}, err
	}
	k, err := orderKey(o)
	if err != nil {
		return oncely.Request{}, err
	}
	return oncely.NewRequest(k, []byte(body))
}

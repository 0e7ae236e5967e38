package sqsbatch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

const card = "4111111111111111"

// A body the decoder refuses is acknowledged with a note that holds a code,
// a bounded detail, the body's digest and size: never the body. A card
// number in the body is in neither the note nor the logs, even from a
// body far larger than a note.
func TestPoisonNoteNeverHoldsTheBody(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"id":[`)
	for i := range 20000 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `{"c":"%s"}`, card)
	}
	big.WriteString("]}")
	cases := []struct {
		name, body string
		expr       bool
		code       oncely.Code
	}{
		{"JSON: a card in an object id", `{"id":{"card":"` + card + `"}}`, false, oncely.CodeInvalidPayload},
		{"JSON: a huge array id", big.String(), false, oncely.CodeInvalidPayload},
		{"JSON: a card, not JSON", `{"card":"` + card, false, oncely.CodeInvalidPayload},
		{"JSON: a card as the amount", `{"id":"x-0001","amount":"` + card + `"}`, false, oncely.CodeInvalidPayload},
		{"JSON: a card in an invalid key", `{"id":"` + card + ` x"}`, false, oncely.CodeInvalidKey},
		{"JSON: a card, and the key reused", body("ku-0001", card), false, oncely.CodeKeyReused},
		{"Expr: a card in an object id", `{"id":{"card":"` + card + `"}}`, true, idem.CodeKeyMissing},
		{"Expr: a huge array id", big.String(), true, idem.CodeKeyMissing},
		{"Expr: a card, not JSON", `{"card":"` + card, true, idem.CodeNotJSON},
		{"too large", `{"id":"big-0001","pad":"` + strings.Repeat(card, 2000) + `"}`, false, idem.CodeTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(s *setup) {
				s.opts.MaxBodyBytes = 1 << 20
				if tc.name == "too large" {
					s.opts.MaxBodyBytes = 4096
				}
				if tc.expr {
					s.expr = mustExpr(t, "['order', id]")
				}
			})
			f.run(t, batch(false, rec{id: "earlier", body: body("ku-0001", "")}))
			_, results := f.run(t, batch(false, rec{id: "m1", body: tc.body}))
			note, ok := f.note(t, "m1")
			if !ok || !results[0].Ack() || results[0].Label != "poison" {
				t.Fatalf("result %+v, note stored %v; want poison, acknowledged, with a note", results[0], ok)
			}
			sum := sha256.Sum256([]byte(tc.body))
			if note.Reason != tc.code || note.BodySize != len(tc.body) || note.BodySHA256 != hex.EncodeToString(sum[:]) || note.ID != "m1" {
				t.Errorf("note %+v; want reason %s, the body's size %d and digest", note, tc.code, len(tc.body))
			}
			if len(note.Detail) > driver.MaxPoisonDetail || note.Detail == "" {
				t.Errorf("detail of %d bytes; want 1 to %d", len(note.Detail), driver.MaxPoisonDetail)
			}
			if strings.Contains(note.Detail, card[:8]) || strings.Contains(fmt.Sprintf("%+v", note), card[:8]) {
				t.Errorf("the note quotes the body: %+v", note)
			}
			if strings.Contains(f.logs.String(), card[:8]) {
				t.Errorf("the logs quote the body: %s", f.logs.String())
			}
		})
	}
}

// The JSON decoder's refusals describe the member and the types, never
// the values, in the note's detail.
func TestJSONDecoderErrorsNameTheMemberAndTypesNeverValues(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ body, detail string }{
		{`{"id":"` + card + `",`, "the body is not JSON (at byte 25)"},
		{`{"id":"x-0001","amount":"` + card + `"}`, "member amount is a JSON string; sqsbatch_test.order wants int"},
		{`{"id":` + card + `}`, "member id is a JSON number; sqsbatch_test.order wants string"},
		{`["` + card + `"]`, "the body is a JSON array; sqsbatch_test.order wants sqsbatch_test.order"},
	} {
		_, results := f.run(t, batch(false, rec{id: "m1", body: tc.body}))
		note, ok := f.note(t, "m1")
		if !ok || results[0].Code != oncely.CodeInvalidPayload || note.Detail != tc.detail {
			t.Errorf("%s: note %q (%v, %s); want INVALID_PAYLOAD %q", tc.body, note.Detail, ok, results[0].Code, tc.detail)
		}
	}
}

// narrow has members a card number overflows, and a map keyed by numbers.
type narrow struct {
	ID    string         `json:"id"`
	Cents int32          `json:"cents"`
	Tags  map[int]string `json:"tags"`
}

// A number the member cannot hold, and a map key that is not a number,
// are refused naming the types too, never quoting the number or the key.
func TestJSONDecoderOverflowErrorsNeverQuoteTheNumber(t *testing.T) {
	store := oncelytest.NewStore()
	engine, err := oncely.New(store, oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sqsbatch.New(engine, sqsbatch.JSON(func(n narrow) (string, error) { return oncely.Key("narrow", n.ID) }),
		func(context.Context, narrow) ([]byte, oncely.Effects, error) { return nil, nil, nil }, sqsbatch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{
		`{"id":"n-0001","cents":` + card + `}`,
		`{"id":"n-0001","tags":{"` + card + `x":"a"}}`,
	} {
		_, results, err := h.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: b, EventSourceARN: arn}}})
		if err != nil {
			t.Fatal(err)
		}
		note, ok, err := store.GetPoison(context.Background(), "m1", time.Now())
		if err != nil || !ok || results[0].Code != oncely.CodeInvalidPayload {
			t.Fatalf("%s: %+v, note %v %v; want INVALID_PAYLOAD with a note", b, results[0], ok, err)
		}
		if strings.Contains(note.Detail, card[:8]) {
			t.Errorf("%s: the note's detail %q quotes the body", b, note.Detail)
		}
	}
}

// A key function's error refuses the message with INVALID_KEY and its
// text; so does a key oncely.Key refuses.
func TestKeyFunctionErrorIsInvalidKey(t *testing.T) {
	f := newFixture(t, func(s *setup) {
		s.decoder = sqsbatch.JSON(func(o order) (string, error) {
			if o.ID == "" {
				return "", errors.New("the order has no id")
			}
			return oncely.Key("order", o.ID)
		})
	})
	_, results := f.run(t, batch(false, rec{id: "m1", body: `{"reply":""}`}, rec{id: "m2", body: `{"id":"a:b"}`}))
	for i, want := range []string{"the key function refused the event: the order has no id", "part #2 contains ':'"} {
		r := results[i]
		note, ok := f.note(t, r.MessageID)
		if !ok || r.Label != "poison" || r.Code != oncely.CodeInvalidKey || note.Reason != oncely.CodeInvalidKey || !strings.Contains(note.Detail, want) {
			t.Errorf("%s: %s %s, note %+v (%v); want poison INVALID_KEY saying %q", r.MessageID, r.Label, r.Code, note, ok, want)
		}
	}
}

// A decoder's error text of any length is cut to MaxPoisonDetail in the
// note.
func TestPoisonDetailIsBounded(t *testing.T) {
	f := newFixture(t, func(s *setup) {
		s.decoder = func(events.SQSMessage) (oncely.Request, order, error) {
			return oncely.Request{}, order{}, errors.New(strings.Repeat("the event is not one of ours; ", 100))
		}
	})
	_, results := f.run(t, batch(false, rec{id: "m1", body: body("lo-00001", "")}))
	note, ok := f.note(t, "m1")
	if !ok || results[0].Code != oncely.CodeInvalidPayload || len(note.Detail) != driver.MaxPoisonDetail || !strings.HasPrefix(note.Detail, "the event is not one of ours") {
		t.Errorf("note %+v (%v, %s); want INVALID_PAYLOAD (a plain error's code) with the text cut at %d bytes", note, ok, results[0].Code, driver.MaxPoisonDetail)
	}
}

// refusingPoison is the in-memory store whose poison notes fail with err.
type refusingPoison struct {
	*oncelytest.Store
	err error
}

func (s refusingPoison) RecordPoison(context.Context, driver.Poison) error { return s.err }

// A message is acknowledged as poison only once its note is stored: when
// the note cannot be stored it goes back to the queue, as store_error, or
// store_refused when the store's error is permanent. Options.Poison takes
// the place of the engine's store.
func TestPoisonNoteNotStoredMeansNotAcknowledged(t *testing.T) {
	transient := driver.Transient(errors.New("throttled"))
	permanent := driver.Permanent(errors.New("access denied to the table"))
	for _, tc := range []struct {
		name  string
		mod   func(*setup)
		label string
	}{
		{"the engine's store fails for now", func(s *setup) { s.store = refusingPoison{oncelytest.NewStore(), transient} }, "store_error"},
		{"the engine's store refuses", func(s *setup) { s.store = refusingPoison{oncelytest.NewStore(), permanent} }, "store_refused"},
		{"Options.Poison fails, the engine's store would not", func(s *setup) { s.opts.Poison = refusingPoison{oncelytest.NewStore(), transient} }, "store_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.mod)
			resp, results := f.run(t, batch(false, rec{id: "m1", body: `{"id":`}, rec{id: "m2", body: body("ok-00001", "")}))
			if got := failures(resp); len(got) != 1 || got[0] != "m1" {
				t.Fatalf("batchItemFailures %v; want [m1]", got)
			}
			if r := results[0]; string(r.Label) != tc.label || r.Ack() || r.Code != oncely.CodeInvalidPayload {
				t.Errorf("m1: %s %s ack %v; want %s INVALID_PAYLOAD, not acknowledged", r.Label, r.Code, r.Ack(), tc.label)
			}
			if _, ok := f.note(t, "m1"); ok {
				t.Errorf("a note reached the fixture's store, which Options.Poison replaces")
			}
			if results[1].Label != "executed" {
				t.Errorf("m2: %s; want executed", results[1].Label)
			}
			if !strings.Contains(f.logs.String(), "poison note not stored") {
				t.Errorf("the failed note is not logged")
			}
		})
	}
}

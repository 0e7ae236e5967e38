package queue_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/keyexpr"
)

// seen records the events the action got.
type seen struct {
	mu     sync.Mutex
	events []action.Event
}

func (s *seen) do(_ context.Context, ev action.Event) (action.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return action.Result{Body: []byte(`{"ok":true}`)}, nil
}

func envelope(source string, scheme inbound.Scheme, id, body string) string {
	return string(inbound.Envelope{Source: source, Scheme: scheme, DeliveryID: id, Body: []byte(body)}.Encode())
}

// An inbound envelope gets its own key and fingerprint whatever the
// configured expressions say (these would refuse it: it has no id and no
// action), and the action gets the sender's body, marked as a webhook.
func TestInboundEnvelopeBypassesTheExpressions(t *testing.T) {
	var s seen
	keys, err := keyexpr.New("['evt', id, action]", "data")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *fixtureOptions) { o.action, o.keys, o.maxBody = s.do, keys, 1<<20 })
	body := "{\"type\": \"invoice.paid\",\n \"data\": {\"amount\": 4200}}"
	_, results, err := f.h.Handle(context.Background(), batch(false, rec{id: "m1", body: envelope("acme", inbound.StandardWebhooks, "msg_1", body)}))
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; r.Label != idem.LabelExecuted || r.Key != "wh:acme:msg_1" {
		t.Fatalf("got %+v; want executed under wh:acme:msg_1", r)
	}
	want := action.Event{Key: "wh:acme:msg_1", Body: []byte(body), Source: action.SourceWebhook, ID: "m1",
		Inbound: &action.Inbound{Source: "acme", Scheme: "standard-webhooks", DeliveryID: "msg_1"}}
	if diff := cmp.Diff([]action.Event{want}, s.events); diff != "" {
		t.Errorf("the action's events (-want +got):\n%s", diff)
	}
	rec, ok, _ := f.store.Get(context.Background(), "wh:acme:msg_1", time.Now())
	if wantFP, _ := inbound.Fingerprint(inbound.StandardWebhooks, []byte(body)); !ok || rec.Fingerprint != wantFP {
		t.Errorf("record %+v; want the whole body's fingerprint %s, not the payload expression's", rec, wantFP)
	}
}

// A sender's retry, a lost 202 and a queue duplicate all arrive as another
// message with the same delivery id: one action run. The same id with
// another body is refused with a KEY_REUSED note (the 202 was already
// sent); a Stripe retry that differs only in pending_webhooks is a replay.
func TestInboundDuplicatesCollapse(t *testing.T) {
	var s seen
	f := newFixture(t, func(o *fixtureOptions) { o.action, o.maxBody = s.do, 1<<20 })
	stripeEvent := func(pending string) string {
		return `{"id":"evt_1","object":"event","pending_webhooks":` + pending + `,"data":{"object":{"amount":100}},"type":"charge.succeeded"}`
	}
	_, results, err := f.h.Handle(context.Background(), batch(false,
		rec{id: "m1", body: envelope("acme", inbound.StandardWebhooks, "msg_1", `{"n":1}`)},
		rec{id: "m2", body: envelope("acme", inbound.StandardWebhooks, "msg_1", `{"n":1}`)}, // a queue duplicate in the batch
		rec{id: "m3", body: envelope("pay", inbound.Stripe, "evt_1", stripeEvent("2"))},
	))
	if err != nil {
		t.Fatal(err)
	}
	_, later, err := f.h.Handle(context.Background(), batch(false,
		rec{id: "m4", body: envelope("acme", inbound.StandardWebhooks, "msg_1", ` {"n":1} `)}, // the sender's retry, re-signed
		rec{id: "m5", body: envelope("pay", inbound.Stripe, "evt_1", stripeEvent("1"))},       // Stripe's retry: one endpoint fewer pending
		rec{id: "m6", body: envelope("acme", inbound.StandardWebhooks, "msg_1", `{"n":2}`)},   // the id reused with another body
		rec{id: "m7", body: envelope("other", inbound.StandardWebhooks, "msg_1", `{"n":1}`)},  // another source's msg_1
	))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range append(results, later...) {
		got[r.MessageID] = string(r.Label) + " " + string(r.Code) + " " + r.Key
	}
	// m1 and m2 run at once: either may be the one that executes.
	if got["m2"] == "executed  wh:acme:msg_1" {
		got["m1"], got["m2"] = got["m2"], got["m1"]
	}
	want := map[string]string{
		"m1": "executed  wh:acme:msg_1",
		"m2": "replayed  wh:acme:msg_1",
		"m3": "executed  wh:pay:evt_1",
		"m4": "replayed  wh:acme:msg_1",
		"m5": "replayed  wh:pay:evt_1",
		"m6": "poison KEY_REUSED wh:acme:msg_1",
		"m7": "executed  wh:other:msg_1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if len(s.events) != 3 {
		t.Errorf("the action ran %d times; want 3 (acme msg_1, pay evt_1, other msg_1)", len(s.events))
	}
	note, ok, _ := f.store.GetPoison(context.Background(), "m6", time.Now())
	if !ok || note.Reason != idem.CodeKeyReused {
		t.Errorf("poison note for m6: %+v, %v; want KEY_REUSED", note, ok)
	}
}

// A body that begins like an envelope but is not one is poison, with a
// note that names the problem, never the content.
func TestMalformedEnvelopeIsPoison(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name, body string
		code       idem.Code
	}{
		{"unknown scheme", `{"oncely_inbound":1,"source":"acme","scheme":"svix","delivery_id":"m","body":{}}`, idem.CodeInvalidPayload},
		{"id unfit for a key", `{"oncely_inbound":1,"source":"acme","scheme":"github","delivery_id":"secret value","body":{}}`, idem.CodeInvalidKey},
		{"stripe id mismatch", `{"oncely_inbound":1,"source":"pay","scheme":"stripe","delivery_id":"evt_2","body":{"id":"evt_1"}}`, idem.CodeInvalidPayload},
		{"truncated", `{"oncely_inbound":1,"source":"acme"`, idem.CodeInvalidPayload},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, results, _ := f.h.Handle(context.Background(), batch(false, rec{id: c.name, body: c.body}))
			note, ok, _ := f.store.GetPoison(context.Background(), c.name, time.Now())
			if !ok || results[0].Label != idem.LabelPoison || note.Reason != c.code {
				t.Fatalf("got %+v, note %+v; want poison %s", results[0], note, c.code)
			}
			if strings.Contains(note.Detail, "secret value") {
				t.Errorf("note %q quotes the body", note.Detail)
			}
		})
	}
}

package queue_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
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

// ghEnvelope is a GitHub delivery's envelope from the source "gh".
func ghEnvelope(id, body string) string { return envelope("gh", inbound.GitHub, id, body) }

// handle runs one batch of recs and returns each one's label, code and
// key by message id.
func handle(t *testing.T, f *fixture, recs ...rec) map[string]string {
	t.Helper()
	_, results, err := f.h.Handle(context.Background(), batch(false, recs...))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range results {
		got[r.MessageID] = string(r.Label) + " " + string(r.Code) + " " + r.Key
	}
	return got
}

// ghKey is the key a GitHub delivery of body from "gh" runs under.
func ghKey(t *testing.T, body string) string {
	t.Helper()
	key, _, err := inbound.BodyKey("gh", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// GitHub signs the body only: whoever captured a delivery can send it again
// under a fresh X-GitHub-Delivery, and it verifies. It is keyed by its body,
// so it runs once whatever id it comes under.
func TestGitHubReplayUnderAnotherIDRunsOnce(t *testing.T) {
	var s seen
	f := newFixture(t, func(o *fixtureOptions) { o.action, o.maxBody = s.do, 1<<20 })
	body := `{"action":"opened","number":7,"repository":{"id":1},"sender":{"id":9}}`
	key := ghKey(t, body)
	got := handle(t, f, rec{id: "m1", body: ghEnvelope("72d3162e-cc78-11e3-81ab-4c9367dc0958", body)})
	for id, later := range handle(t, f,
		rec{id: "m2", body: ghEnvelope("00000000-0000-0000-0000-000000000000", body)},
		rec{id: "m3", body: ghEnvelope("11111111-1111-1111-1111-111111111111", "\n"+body)}, // trimmed as the route does
	) {
		got[id] = later
	}
	want := map[string]string{
		"m1": "executed  " + key,
		"m2": "replayed  " + key,
		"m3": "replayed  " + key,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if len(s.events) != 1 {
		t.Errorf("the action ran %d times; want 1 (one captured delivery, three delivery ids)", len(s.events))
	}
}

// X-GitHub-Delivery is the event's: two hooks (or Apps) receiving one event
// get the same id, each with its own body. Each body is its own key and
// runs once: no KEY_REUSED poison note for the second.
func TestGitHubOneDeliveryIDTwoBodiesRunsTwice(t *testing.T) {
	var s seen
	f := newFixture(t, func(o *fixtureOptions) { o.action, o.maxBody = s.do, 1<<20 })
	const id = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	appA := `{"action":"opened","number":7,"installation":{"id":1}}`
	appB := `{"action":"opened","number":7,"installation":{"id":2}}`
	got := handle(t, f, rec{id: "m1", body: ghEnvelope(id, appA)}, rec{id: "m2", body: ghEnvelope(id, appB)})
	for id, later := range handle(t, f, rec{id: "m3", body: ghEnvelope(id, appA)}, rec{id: "m4", body: ghEnvelope(id, appB)}) {
		got[id] = later
	}
	want := map[string]string{
		"m1": "executed  " + ghKey(t, appA),
		"m2": "executed  " + ghKey(t, appB),
		"m3": "replayed  " + ghKey(t, appA), // each hook's redelivery
		"m4": "replayed  " + ghKey(t, appB),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	bodies := map[string]bool{}
	for _, ev := range s.events {
		bodies[string(ev.Body)] = true
	}
	if len(s.events) != 2 || !bodies[appA] || !bodies[appB] {
		t.Errorf("the action got %d events, bodies %v; want 2, one per body", len(s.events), bodies)
	}
	if note, ok, _ := f.store.GetPoison(context.Background(), "m2", time.Now()); ok {
		t.Errorf("poison note for the second hook's delivery: %+v; want none", note)
	}
}

// A GitHub delivery received before deliveries were keyed by their body
// has its record under wh:<source>:<delivery-id>. Its redelivery (GitHub's
// Redeliver, a DLQ redrive) under that id is settled by that record: it
// does not run twice. Another body under the id (another hook's) runs.
func TestGitHubRecordUnderTheDeliveryIDStillCounts(t *testing.T) {
	const id = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	body := `{"action":"opened","number":7,"repository":{"id":1}}`
	other := `{"action":"opened","number":7,"installation":{"id":2}}`
	idKey, err := inbound.Key("gh", id)
	if err != nil {
		t.Fatal(err)
	}
	// before stores what the queue path stored before the change: the
	// delivery's record under its id, from the engine's own run.
	before := func(f *fixture, body string, work oncely.Work) {
		t.Helper()
		fp, err := inbound.Fingerprint(inbound.GitHub, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		f.engine.Run(context.Background(), oncely.Request{Key: idKey, Fingerprint: fp}, work)
	}
	const ranNow = `{"status":200,"json":{"ok":true}}` // seen.do's result, stored
	succeeded := func(context.Context) ([]byte, oncely.Effects, error) {
		return []byte(`{"json":{"ran":"before"}}`), nil, nil
	}
	for _, c := range []struct {
		name   string
		setup  func(*fixture)
		body   string
		runs   int
		ack    bool
		status idem.Status
		code   idem.Code
		result string
	}{
		{name: "succeeded: its result, without a run", setup: func(f *fixture) { before(f, body, succeeded) },
			body: body, runs: 0, ack: true, status: idem.StatusSucceeded, result: `{"json":{"ran":"before"}}`},
		{name: "failed for good: its failure, without a run", body: body, runs: 0, ack: true, status: idem.StatusFailed, code: "HTTP_404",
			setup: func(f *fixture) {
				before(f, body, func(context.Context) ([]byte, oncely.Effects, error) {
					return nil, nil, oncely.PermanentCode("HTTP_404", errors.New("404"))
				})
			}},
		{name: "in progress elsewhere: back to the queue, without a run", body: body, runs: 0, ack: false, status: idem.StatusFailed, code: idem.CodeTransientFailure,
			setup: func(f *fixture) {
				now := time.Now()
				fp, _ := inbound.Fingerprint(inbound.GitHub, []byte(body))
				_, _, _ = f.store.Reserve(context.Background(), idem.Reservation{Key: idKey, Fingerprint: fp, Token: "old-version",
					Now: now, LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(time.Hour)})
			}},
		{name: "released after a transient failure: runs, as its next delivery would", body: body, runs: 1, ack: true, status: idem.StatusSucceeded, result: ranNow,
			setup: func(f *fixture) {
				before(f, body, func(context.Context) ([]byte, oncely.Effects, error) {
					return nil, nil, oncely.TransientNextDelivery(errors.New("503"))
				})
			}},
		{name: "another body under the id (another hook's): runs", setup: func(f *fixture) { before(f, other, succeeded) },
			body: body, runs: 1, ack: true, status: idem.StatusSucceeded, result: ranNow},
		{name: "no record under the id: runs", setup: func(*fixture) {},
			body: body, runs: 1, ack: true, status: idem.StatusSucceeded, result: ranNow},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s seen
			f := newFixture(t, func(o *fixtureOptions) { o.action, o.maxBody = s.do, 1<<20 })
			c.setup(f)
			idRecord, idFound, _ := f.store.Get(context.Background(), idKey, time.Now())
			_, results, err := f.h.Handle(context.Background(), batch(false, rec{id: "m1", body: ghEnvelope(id, c.body)}))
			if err != nil {
				t.Fatal(err)
			}
			if len(s.events) != c.runs || results[0].Ack() != c.ack {
				t.Errorf("the action ran %d times, acknowledged %v (%+v); want %d, %v", len(s.events), results[0].Ack(), results[0], c.runs, c.ack)
			}
			rec, ok, _ := f.store.Get(context.Background(), ghKey(t, c.body), time.Now())
			if !ok || rec.Status != c.status || rec.ErrorCode != c.code || string(rec.Result) != c.result {
				t.Errorf("the body's record: %+v (found %v); want %s %s %s", rec, ok, c.status, c.code, c.result)
			}
			if after, found, _ := f.store.Get(context.Background(), idKey, time.Now()); found != idFound || !cmp.Equal(after, idRecord) {
				t.Errorf("the record under the id changed: %+v, want %+v", after, idRecord)
			}
		})
	}
}

package router_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// memQueue stands in for the events queue between the two invocations.
type memQueue struct {
	mu    sync.Mutex
	msgs  []string
	attrs []map[string]string
}

func (q *memQueue) Send(_ context.Context, body []byte, attrs map[string]string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, string(body))
	q.attrs = append(q.attrs, attrs)
	return "q-" + string(rune('0'+len(q.msgs))), nil
}

type fixedSources struct{ s *inbound.Sources }

func (f fixedSources) Get(context.Context) (*inbound.Sources, error) { return f.s, nil }

// A signed delivery is answered 202 and queued; the queue invocation runs
// the action once with the sender's body under wh:<source>:<id>; the
// sender's retry, signed anew, is queued again and replayed. Each
// invocation writes one EMF document, the route's with Source webhook and
// its own outcomes.
func TestWebhookDeliveryQueuedThenDeliveredOnce(t *testing.T) {
	key := []byte("0123456789abcdef01234567")
	srcs, err := inbound.ParseSources(`{"acme":{"scheme":"standard-webhooks","secrets":["whsec_` + base64.StdEncoding.EncodeToString(key) + `"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	q := &memQueue{}
	h := newHarness(t, func(o *harnessOptions) {
		o.webhooks = &receiving.Options{Sources: fixedSources{srcs}, Queue: q, MaxMessageBytes: 1 << 20, Proof: proofKeys}
	})
	body := `{"type":"invoice.paid","amount":4200}`
	post := func(at time.Time) events.APIGatewayV2HTTPResponse {
		t.Helper()
		headers := webhooksender.StandardWebhooks("msg_1", at, []byte(body), key)
		headers["content-type"] = "application/json"
		req := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: receiving.WebhookRouteKey, RawPath: "/webhooks/acme",
			PathParameters: map[string]string{"source": "acme"}, Headers: headers, Body: body,
			RequestContext: events.APIGatewayV2HTTPRequestContext{RouteKey: receiving.WebhookRouteKey, RequestID: "r1",
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/acme"}}}
		payload, _ := json.Marshal(req)
		out, err := h.router.Invoke(context.Background(), payload)
		if err != nil {
			t.Fatal(err)
		}
		return out.(events.APIGatewayV2HTTPResponse)
	}
	// The sources secret's failed re-reads are counted in the route's
	// documents; the signing secret's wait for the next SQS or HTTP one,
	// whose alarms watch them.
	h.router.Secret = &secretCounts{secretsource.Counts{Ignored: 1, RefreshFailed: 1}}
	h.router.InboundSecret = &secretCounts{secretsource.Counts{RefreshFailed: 3}}
	if resp := post(time.Now()); resp.StatusCode != 202 {
		t.Fatalf("first delivery: %d %s; want 202", resp.StatusCode, resp.Body)
	}
	h.sqs(context.Background(), false, msg{id: "m1", body: q.msgs[0]})
	if resp := post(time.Now().Add(time.Second)); resp.StatusCode != 202 {
		t.Fatalf("the sender's retry: %d %s; want 202 again", resp.StatusCode, resp.Body)
	}
	h.sqs(context.Background(), false, msg{id: "m2", body: q.msgs[1]})
	if n := h.down.Count("wh:acme:msg_1"); n != 1 {
		t.Errorf("downstream deliveries for wh:acme:msg_1: %d; want 1", n)
	}
	if a := h.down.Audit(); len(a) != 1 || string(a[0].Body) != body {
		t.Errorf("downstream got %+v; want the sender's body once", a)
	}
	docs := strings.Split(strings.TrimSpace(h.metrics.String()), "\n")
	if len(docs) != 4 {
		t.Fatalf("%d EMF documents; want 4 (one per invocation)", len(docs))
	}
	for i, want := range []struct {
		source, metric string
		names          []string
		refreshFailed  float64
	}{
		{router.SourceWebhook, "queued", router.WebhookMetrics(), 3},
		{router.SourceSQS, "executed", router.Metrics(), 1},
		{router.SourceWebhook, "queued", router.WebhookMetrics(), 0},
		{router.SourceSQS, "replayed", router.Metrics(), 0},
	} {
		var doc map[string]any
		_ = json.Unmarshal([]byte(docs[i]), &doc)
		if doc[router.MetricSecretRefreshFailed] != want.refreshFailed {
			t.Errorf("document %d: %s %v; want %v", i, router.MetricSecretRefreshFailed, doc[router.MetricSecretRefreshFailed], want.refreshFailed)
		}
		var declared []string
		for _, m := range doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any) {
			declared = append(declared, m.(map[string]any)["Name"].(string))
		}
		if doc["Source"] != want.source || doc[want.metric] != float64(1) || !slices.Equal(declared, append(slices.Clone(want.names), "duration")) {
			t.Errorf("document %d: Source %v, %s %v, metrics %v; want %s, 1, %v", i, doc["Source"], want.metric, doc[want.metric], declared, want.source, want.names)
		}
	}
}

// staticProof is the envelope proof secret's live keys.
type staticProof struct{ keys [][]byte }

func (p staticProof) Keys(context.Context) ([][]byte, error) { return p.keys, nil }

var proofKeys = staticProof{keys: [][]byte{[]byte("envelope-proof-key-000000001")}}

// After the cutover, an envelope a queue producer sent (no proof, for each
// scheme) or proved with another key is a poison note that never runs the
// action, counted as envelope_unproved in the SQS document (the metric the
// template's alarm watches); the route's own envelope, proved, runs once.
func TestForgedEnvelopeIsCountedAndNeverRuns(t *testing.T) {
	key := []byte("0123456789abcdef01234567")
	srcs, err := inbound.ParseSources(`{"acme":{"scheme":"standard-webhooks","secrets":["whsec_` + base64.StdEncoding.EncodeToString(key) + `"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	q := &memQueue{}
	h := newHarness(t, func(o *harnessOptions) {
		o.webhooks = &receiving.Options{Sources: fixedSources{srcs}, Queue: q, MaxMessageBytes: 1 << 20, Proof: proofKeys}
		// The testdata records were sent in 2018: after this cutover in 2017.
		o.proof = queue.Proof{Keys: proofKeys, Since: time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC)}
	})
	forged := []msg{
		{id: "f-sw", body: `{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"msg_f","body":{"paid":true}}`},
		{id: "f-stripe", body: `{"oncely_inbound":1,"source":"pay","scheme":"stripe","delivery_id":"evt_f","body":{"id":"evt_f","type":"invoice.paid"}}`},
		{id: "f-gh", body: `{"oncely_inbound":1,"source":"gh","scheme":"github","delivery_id":"d-f","body":{"action":"opened"}}`},
	}
	otherKey := `{"oncely_inbound":1,"source":"acme","scheme":"standard-webhooks","delivery_id":"msg_k","body":{"paid":true}}`
	forged = append(forged, msg{id: "f-key", body: otherKey,
		attrs: map[string]string{inbound.ProofAttribute: inbound.Prove([][]byte{[]byte("a-producer-guessed-this-key-0")}, []byte(otherKey))}})
	resp := h.sqs(context.Background(), false, forged...)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures %v; want every forged envelope acknowledged with a note", resp.BatchItemFailures)
	}
	for _, m := range forged {
		note, ok, _ := h.store.GetPoison(context.Background(), m.id, time.Now())
		if !ok || note.Reason != idem.CodeEnvelopeUnproved {
			t.Errorf("%s: poison note %+v, %v; want ENVELOPE_UNPROVED", m.id, note, ok)
		}
	}
	if a := h.down.Audit(); len(a) != 0 {
		t.Fatalf("the action ran for a forged envelope: %+v", a)
	}

	// The route's own envelope, proved, runs once.
	body := `{"type":"invoice.paid","amount":4200}`
	headers := webhooksender.StandardWebhooks("msg_1", time.Now(), []byte(body), key)
	headers["content-type"] = "application/json"
	req := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: receiving.WebhookRouteKey, RawPath: "/webhooks/acme",
		PathParameters: map[string]string{"source": "acme"}, Headers: headers, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RouteKey: receiving.WebhookRouteKey, RequestID: "r1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/acme"}}}
	payload, _ := json.Marshal(req)
	if out, err := h.router.Invoke(context.Background(), payload); err != nil || out.(events.APIGatewayV2HTTPResponse).StatusCode != 202 {
		t.Fatalf("the delivery: %+v, %v; want 202", out, err)
	}
	h.sqs(context.Background(), false, msg{id: "g1", body: q.msgs[0], attrs: q.attrs[0]})
	if n := h.down.Count("wh:acme:msg_1"); n != 1 {
		t.Errorf("downstream deliveries for wh:acme:msg_1: %d; want 1", n)
	}

	docs := strings.Split(strings.TrimSpace(h.metrics.String()), "\n")
	if len(docs) != 3 {
		t.Fatalf("%d EMF documents; want 3", len(docs))
	}
	for i, want := range []struct {
		unproved float64
		names    []string
	}{
		{4, append(router.Metrics(), router.MetricEnvelopeUnproved)},
		{0, router.WebhookMetrics()},
		{0, router.Metrics()}, // none refused: the document is as it always was
	} {
		var doc map[string]any
		_ = json.Unmarshal([]byte(docs[i]), &doc)
		var declared []string
		for _, m := range doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any) {
			declared = append(declared, m.(map[string]any)["Name"].(string))
		}
		got, _ := doc[router.MetricEnvelopeUnproved].(float64)
		if got != want.unproved || !slices.Equal(declared, append(slices.Clone(want.names), "duration")) {
			t.Errorf("document %d: %s %v, metrics %v; want %v, %v", i, router.MetricEnvelopeUnproved, got, declared, want.unproved, want.names)
		}
	}
}

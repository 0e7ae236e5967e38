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

	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// memQueue stands in for the events queue between the two invocations.
type memQueue struct {
	mu   sync.Mutex
	msgs []string
}

func (q *memQueue) Send(_ context.Context, body []byte) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, string(body))
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
		o.webhooks = &receiving.Options{Sources: fixedSources{srcs}, Queue: q, MaxMessageBytes: 1 << 20}
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

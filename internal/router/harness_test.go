package router_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/truora/minidyn/server"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

const namespace = "handler-test"

// harness is the whole handler over real parts: minidyn in-process, the
// DynamoDB store, the engine, the notify action against a real HTTP
// downstream that counts deliveries per Idempotency-Key.
type harness struct {
	t       *testing.T
	router  *router.Router
	ddb     *server.Server
	client  *dynamodb.Client
	counter *ddblocal.Counter
	table   string
	down    *fakewebhook.Server
	store   *ddbstore.Store
	metrics *syncBuffer
	logs    *syncBuffer
	mu      sync.Mutex
	sleeps  []time.Duration
	notify  *notify.Notifier
	// ignoring holds every action of an event with "ignore_ctx":true,
	// whatever its context says, until the test ends.
	ignoring chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harnessOptions struct {
	retry idem.RetryPolicy
	// notifyTimeout is NOTIFY_TIMEOUT; zero means 2 s.
	notifyTimeout time.Duration
	payloadExpr   string
	visibility    sqsbatch.VisibilityAPI
	webhooks      *receiving.Options
	proof         queue.Proof
}

func newHarness(t *testing.T, mods ...func(*harnessOptions)) *harness {
	t.Helper()
	o := harnessOptions{
		// Max also caps the Retry-After honoured in-call (2 s, as the
		// function's default); the backoff steps stay 10 and 20 ms.
		retry: idem.RetryPolicy{AttemptsPerDelivery: 3, Base: 10 * time.Millisecond, Max: 2 * time.Second},
	}
	for _, m := range mods {
		m(&o)
	}
	h := &harness{t: t, down: fakewebhook.New(), metrics: &syncBuffer{}, logs: &syncBuffer{}, ignoring: make(chan struct{})}
	t.Cleanup(func() { close(h.ignoring) })
	var ep string
	h.ddb, ep = ddblocal.Minidyn(t)
	h.client, h.counter = ddblocal.Client(ddblocal.Config(ep, nil))
	h.table = ddblocal.NewTable(t, h.client)
	store, err := ddbstore.New(h.client, h.table, namespace)
	if err != nil {
		t.Fatal(err)
	}
	h.store = store
	hs := httptest.NewServer(h.down)
	t.Cleanup(func() { h.down.Close(); hs.Close() })
	logger := slog.New(slog.NewJSONHandler(h.logs, nil))
	engine, err := idem.New(idem.Options{
		Store: store, Retry: o.retry, Logger: logger, Random: func() float64 { return 0.999 },
		// Backoff delays are recorded, not slept.
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.sleeps = append(h.sleeps, d)
			return ctx.Err()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := notify.New(hs.URL, cmp.Or(o.notifyTimeout, 2*time.Second), notify.Classifier{})
	h.notify = n
	// The business action: notify, plus a way for a test event to panic.
	act := func(ctx context.Context, ev action.Event) (action.Result, error) {
		if bytes.Contains(ev.Body, []byte(`"panic":true`)) {
			panic("the action hit a bug")
		}
		if bytes.Contains(ev.Body, []byte(`"ignore_ctx":true`)) {
			<-h.ignoring
			return action.Result{}, nil
		}
		var f struct {
			FailCode string `json:"fail_code"`
		}
		if json.Unmarshal(ev.Body, &f) == nil && f.FailCode != "" {
			return action.Result{}, idem.PermanentCode(idem.Code(f.FailCode), errors.New("the action refused"))
		}
		return n.Do(ctx, ev)
	}
	keys, err := keyexpr.New("", o.payloadExpr)
	if err != nil {
		t.Fatal(err)
	}
	so := sqsbatch.Options{MaxConcurrency: 4}
	if o.visibility != nil {
		so.Backoff = &sqsbatch.Backoff{SQS: o.visibility, Base: 10 * time.Second, Max: 80 * time.Second}
	}
	sqs, err := queue.New(engineref.Wrap(engine).(*oncely.Engine), keys, act, so, o.proof)
	if err != nil {
		t.Fatal(err)
	}
	api, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Action: act, JWTIssuer: "https://issuer.example", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h.router = &router.Router{SQS: sqs, HTTP: api, Function: namespace, Metrics: h.metrics, Logger: logger}
	if o.webhooks != nil {
		o.webhooks.Engine, o.webhooks.Logger = engineref.Wrap(engine).(*oncely.Engine), logger
		if h.router.Receiving, err = receiving.New(*o.webhooks); err != nil {
			t.Fatal(err)
		}
	}
	h.counter.Reset()
	return h
}

// msg is one SQS message for a batch.
type msg struct {
	id, body, group string
	// attrs are the record's String message attributes.
	attrs map[string]string
}

func event(id, action string, extra ...string) string {
	b := `{"id":"` + id + `","action":"` + action + `"`
	for _, e := range extra {
		b += "," + e
	}
	return b + "}"
}

// loadSQS builds a batch from the real-shaped record in testdata.
func loadSQS(t *testing.T, fifo bool, msgs ...msg) []byte {
	t.Helper()
	file := "testdata/sqs-standard.json"
	if fifo {
		file = "testdata/sqs-fifo.json"
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var tmpl events.SQSEvent
	if err := json.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for _, m := range msgs {
		r := tmpl.Records[0]
		r.MessageId, r.Body = m.id, m.body
		r.Attributes = map[string]string{}
		for k, v := range tmpl.Records[0].Attributes {
			r.Attributes[k] = v
		}
		if fifo {
			r.Attributes["MessageGroupId"] = m.group
		}
		r.MessageAttributes = map[string]events.SQSMessageAttribute{}
		for k, v := range m.attrs {
			r.MessageAttributes[k] = events.SQSMessageAttribute{DataType: "String", StringValue: &v}
		}
		ev.Records = append(ev.Records, r)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

func (h *harness) sqs(ctx context.Context, fifo bool, msgs ...msg) events.SQSEventResponse {
	h.t.Helper()
	out, err := h.router.Invoke(ctx, loadSQS(h.t, fifo, msgs...))
	if err != nil {
		h.t.Fatalf("Invoke: %v", err)
	}
	resp, ok := out.(events.SQSEventResponse)
	if !ok {
		h.t.Fatalf("Invoke returned %T; want events.SQSEventResponse", out)
	}
	// The response travels as JSON; it must never carry an empty identifier.
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" {
			h.t.Fatalf("empty itemIdentifier in %+v", resp)
		}
	}
	return resp
}

func failed(resp events.SQSEventResponse) []string {
	out := []string{}
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}

func apiRequest(t *testing.T, key, body string, mod ...func(*events.APIGatewayV2HTTPRequest)) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/apigw-v2-request.json")
	if err != nil {
		t.Fatal(err)
	}
	var req events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	delete(req.Headers, "idempotency-key")
	if key != "" {
		req.Headers["idempotency-key"] = key
	}
	req.Body = body
	for _, m := range mod {
		m(&req)
	}
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

func (h *harness) api(ctx context.Context, payload []byte) events.APIGatewayV2HTTPResponse {
	h.t.Helper()
	out, err := h.router.Invoke(ctx, payload)
	if err != nil {
		h.t.Fatalf("Invoke: %v", err)
	}
	resp, ok := out.(events.APIGatewayV2HTTPResponse)
	if !ok {
		h.t.Fatalf("Invoke returned %T; want events.APIGatewayV2HTTPResponse", out)
	}
	return resp
}

// item reads a raw table item, as an operator would.
func (h *harness) item(pk string) map[string]types.AttributeValue {
	h.t.Helper()
	out, err := h.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &h.table, Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}, ConsistentRead: new(true),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out.Item
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

func (h *harness) recorded() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.sleeps...)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type (
	typesBool = types.AttributeValueMemberBOOL
	typesS    = types.AttributeValueMemberS
)

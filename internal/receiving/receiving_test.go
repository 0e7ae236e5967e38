package receiving_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/testing/memstore"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

var (
	hookNow     = time.Unix(1_780_000_000, 0)
	hookKey     = []byte("0123456789abcdef01234567")
	hookSecrets = `{"acme":{"scheme":"standard-webhooks","secrets":["whsec_` + base64.StdEncoding.EncodeToString(hookKey) + `"]},` +
		`"pay":{"scheme":"stripe","secrets":["whsec_stripe_endpoint_secret_0001"]},` +
		`"gh":{"scheme":"github","secrets":["github-webhook-secret-0001"]}}`
)

// staticSources is a SourceSet that never changes (or always fails).
type staticSources struct {
	s   *inbound.Sources
	err error
}

func (s staticSources) Get(context.Context) (*inbound.Sources, error) { return s.s, s.err }

// queue records what it is sent, or fails with err.
type queue struct {
	mu    sync.Mutex
	sent  [][]byte
	attrs []map[string]string
	err   error
}

func (q *queue) Send(_ context.Context, body []byte, attrs map[string]string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return "", q.err
	}
	q.sent = append(q.sent, body)
	q.attrs = append(q.attrs, attrs)
	return "msg-" + string(rune('0'+len(q.sent))), nil
}

// proofKeys are the envelope proof's live keys, or err.
type proofKeys struct {
	keys [][]byte
	err  error
}

func (p proofKeys) Keys(context.Context) ([][]byte, error) { return p.keys, p.err }

// hookProofKeys are the fixture's proof keys: the current and the previous.
var hookProofKeys = [][]byte{[]byte("proof-key-current-000000001"), []byte("proof-key-previous-00000001")}

type hookFixture struct {
	h     *receiving.Handler
	q     *queue
	store *countingStore
	logs  *bytes.Buffer
}

func newHookFixture(t *testing.T, mod func(*receiving.Options)) *hookFixture {
	t.Helper()
	srcs, err := inbound.ParseSources(hookSecrets)
	if err != nil {
		t.Fatal(err)
	}
	f := &hookFixture{q: &queue{}, store: &countingStore{Store: memstore.New()}, logs: &bytes.Buffer{}}
	engine, err := idem.New(idem.Options{Store: f.store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	o := receiving.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), MaxBodyBytes: 2048, Logger: slog.New(slog.NewJSONHandler(f.logs, nil)),
		Now: func() time.Time { return hookNow }, Sources: staticSources{s: srcs}, Queue: f.q, MaxMessageBytes: 4096,
		Proof: proofKeys{keys: hookProofKeys}}
	if mod != nil {
		mod(&o)
	}
	if f.h, err = receiving.New(o); err != nil {
		t.Fatal(err)
	}
	return f
}

// hook is a request on the receiving route for source, as API Gateway
// passes it for the route POST /webhooks/{source}.
func hook(source string, headers map[string]string, body string, mods ...func(*events.APIGatewayV2HTTPRequest)) events.APIGatewayV2HTTPRequest {
	h := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	r := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: receiving.WebhookRouteKey, RawPath: "/webhooks/" + source, Headers: h, Body: body,
		PathParameters: map[string]string{"source": source},
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: receiving.WebhookRouteKey, RequestID: "r1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/" + source}},
	}
	for _, m := range mods {
		m(&r)
	}
	return r
}

const (
	swBody     = `{"type":"invoice.paid","amount":4200}`
	stripeBody = `{"id":"evt_1","object":"event","pending_webhooks":1,"type":"charge.succeeded"}`
	ghBody     = `{"zen":"Design for failure.","hook_id":1}`
)

func signedSW(id, body string, at time.Time) map[string]string {
	return webhooksender.StandardWebhooks(id, at, []byte(body), hookKey)
}

func TestWebhookResponses(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", 2100) + `"}`
	nearLimit := `{"pad":"` + strings.Repeat("x", 2030) + `"}` // fits as a body; its envelope does not
	tests := []struct {
		name    string
		req     events.APIGatewayV2HTTPRequest
		mod     func(*receiving.Options)
		status  int
		code    idem.Code
		outcome receiving.WebhookOutcome
		key     string
	}{
		{name: "standard webhooks: queued", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), status: 202, outcome: receiving.WebhookQueued, key: "wh:acme:msg_1"},
		{name: "stripe: queued", req: hook("pay", map[string]string{"Stripe-Signature": webhooksender.Stripe(hookNow, []byte(stripeBody), "whsec_stripe_endpoint_secret_0001")}, stripeBody), status: 202, outcome: receiving.WebhookQueued, key: "wh:pay:evt_1"},
		{name: "github: queued", req: hook("gh", map[string]string{"X-Hub-Signature-256": webhooksender.GitHub("github-webhook-secret-0001", []byte(ghBody)), "X-GitHub-Delivery": "d-1"}, ghBody), status: 202, outcome: receiving.WebhookQueued, key: "wh:gh:sha256:d2e904a84c3ed6ca0681ebc84e79ace95de2cd7619598c47eab6d643b35d35fe"}, // keyed by the body (printf %s {"hook_id":1,"zen":"Design for failure."} | sha256sum)
		{name: "a base64-encoded body is verified as its bytes", req: hook("acme", signedSW("msg_2", swBody, hookNow), base64.StdEncoding.EncodeToString([]byte(swBody)), func(r *events.APIGatewayV2HTTPRequest) { r.IsBase64Encoded = true }), status: 202, outcome: receiving.WebhookQueued, key: "wh:acme:msg_2"},
		{name: "$default route, named stage", req: hook("acme", signedSW("msg_3", swBody, hookNow), swBody, func(r *events.APIGatewayV2HTTPRequest) {
			r.RouteKey, r.RequestContext.RouteKey, r.RequestContext.Stage, r.RawPath, r.PathParameters = "$default", "$default", "prod", "/prod/webhooks/acme", nil
		}), status: 202, outcome: receiving.WebhookQueued, key: "wh:acme:msg_3"},
		{name: "no signature", req: hook("acme", nil, swBody), status: 401, code: idem.CodeSignatureMissing, outcome: receiving.WebhookRefused},
		{name: "wrong secret", req: hook("acme", webhooksender.StandardWebhooks("msg_1", hookNow, []byte(swBody), []byte("not-the-key-not-the-key-!")), swBody), status: 401, code: idem.CodeSignatureMismatch, outcome: receiving.WebhookRefused},
		{name: "tampered body", req: hook("acme", signedSW("msg_1", swBody, hookNow), strings.Replace(swBody, "4200", "9999", 1)), status: 401, code: idem.CodeSignatureMismatch, outcome: receiving.WebhookRefused},
		{name: "stale timestamp", req: hook("acme", signedSW("msg_1", swBody, hookNow.Add(-10*time.Minute)), swBody), status: 401, code: idem.CodeTimestampOutsideTolerance, outcome: receiving.WebhookRefused},
		{name: "malformed signature", req: hook("pay", map[string]string{"Stripe-Signature": "v1=abc"}, stripeBody), status: 401, code: idem.CodeSignatureMalformed, outcome: receiving.WebhookRefused},
		{name: "unknown source", req: hook("nobody", signedSW("msg_1", swBody, hookNow), swBody), status: 404, code: idem.CodeUnknownSource, outcome: receiving.WebhookUnknownSource},
		{name: "another method", req: hook("acme", nil, "", func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.HTTP.Method = "GET" }), status: 405, code: idem.CodeMethodNotAllowed, outcome: receiving.WebhookInvalid},
		{name: "body over the limit, refused before verifying", req: hook("acme", signedSW("msg_1", big, hookNow), big), status: 413, code: idem.CodeTooLarge, outcome: receiving.WebhookTooLarge},
		{name: "envelope over the limit", req: hook("acme", signedSW("msg_1", nearLimit, hookNow), nearLimit), status: 413, code: idem.CodeTooLarge, outcome: receiving.WebhookTooLarge, key: "wh:acme:msg_1"},
		{name: "the queue's limit is lower", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) { o.MaxMessageBytes = 64 }, status: 413, code: idem.CodeTooLarge, outcome: receiving.WebhookTooLarge, key: "wh:acme:msg_1"},
		{name: "authentic, not JSON", req: hook("acme", signedSW("msg_1", "a=1", hookNow), "a=1"), status: 400, code: idem.CodeInvalidPayload, outcome: receiving.WebhookInvalid},
		{name: "authentic, form-encoded (GitHub's other content type)", req: hook("gh", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-Hub-Signature-256": webhooksender.GitHub("github-webhook-secret-0001", []byte("payload=%7B%7D")), "X-GitHub-Delivery": "d-1"}, "payload=%7B%7D"), status: 415, code: idem.CodeUnsupportedMediaType, outcome: receiving.WebhookInvalid},
		{name: "authentic, no delivery id", req: hook("gh", map[string]string{"X-Hub-Signature-256": webhooksender.GitHub("github-webhook-secret-0001", []byte(ghBody))}, ghBody), status: 400, code: idem.CodeKeyMissing, outcome: receiving.WebhookInvalid},
		{name: "authentic, delivery id unfit for a key", req: hook("acme", signedSW("msg/1", swBody, hookNow), swBody), status: 400, code: idem.CodeInvalidKey, outcome: receiving.WebhookInvalid},
		{name: "queue unavailable", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Queue = &queue{err: idem.Transient(errors.New("sqs: connection reset by sqs.us-east-1.amazonaws.com"))}
		}, status: 503, code: idem.CodeInboundUnavailable, outcome: receiving.WebhookQueueFailed, key: "wh:acme:msg_1"},
		{name: "queue misconfigured", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Queue = &queue{err: idem.Permanent(errors.New("sqs: access to https://sqs.us-east-1.amazonaws.com/1/q denied"))}
		}, status: 500, code: idem.CodeInboundUnavailable, outcome: receiving.WebhookQueueFailed, key: "wh:acme:msg_1"},
		{name: "proof secret unreadable: nothing unproved is queued", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Proof = proofKeys{err: idem.Transient(errors.New("secretsmanager down"))}
		}, status: 503, code: idem.CodeInboundUnavailable, outcome: receiving.WebhookQueueFailed, key: "wh:acme:msg_1"},
		{name: "sources unreadable", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Sources = staticSources{err: idem.Transient(errors.New("secretsmanager down"))}
		}, status: 503, code: idem.CodeInboundUnavailable, outcome: receiving.WebhookQueueFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newHookFixture(t, tt.mod)
			resp, res := f.h.Handle(context.Background(), tt.req)
			if resp.StatusCode != tt.status || res.Code != tt.code || res.Outcome != tt.outcome || res.Key != tt.key {
				t.Fatalf("got %d %s %s key %q (%s); want %d %s %s key %q", resp.StatusCode, res.Code, res.Outcome, res.Key, resp.Body,
					tt.status, tt.code, tt.outcome, tt.key)
			}
			if n := f.store.n.Load(); n != 0 {
				t.Errorf("%d store calls; want none on the receiving route", n)
			}
			if tt.status != 202 {
				var p struct {
					Status int    `json:"status"`
					Code   string `json:"code"`
					Detail string `json:"detail"`
				}
				if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Status != tt.status || p.Code != string(tt.code) || p.Detail == "" ||
					resp.Headers["Content-Type"] != "application/problem+json" {
					t.Errorf("body %s (%v); want a problem with status, code and a detail", resp.Body, err)
				}
				if len(f.q.sent) != 0 {
					t.Errorf("%d messages queued for a refusal; want none", len(f.q.sent))
				}
				if strings.Contains(resp.Body, "amazonaws.com") || strings.Contains(resp.Body, "secretsmanager") {
					t.Errorf("body %s names internals", resp.Body)
				}
				if (tt.status == 503) != (resp.Headers["Retry-After"] != "") {
					t.Errorf("Retry-After %q with %d; want one exactly with 503", resp.Headers["Retry-After"], tt.status)
				}
				return
			}
			if len(f.q.sent) != 1 {
				t.Fatalf("%d messages queued; want 1", len(f.q.sent))
			}
			// The envelope is proved, over its exact bytes, with each
			// live proof key (a queue function holding either accepts it).
			proof := f.q.attrs[0][inbound.ProofAttribute]
			for _, k := range hookProofKeys {
				if !inbound.CheckProof([][]byte{k}, f.q.sent[0], proof) {
					t.Errorf("attribute %s %q does not prove the envelope with key %q", inbound.ProofAttribute, proof, k)
				}
			}
			env, err := inbound.DecodeEnvelope(f.q.sent[0])
			if err != nil {
				t.Fatal(err)
			}
			req, err := env.Request()
			if err != nil || req.Key != tt.key {
				t.Errorf("the queued envelope's key %q (%v); want %q", req.Key, err, tt.key)
			}
			if want := tt.req.Body; !tt.req.IsBase64Encoded && string(env.Body) != want {
				t.Errorf("the queued body %s; want the sender's %s", env.Body, want)
			}
			if !strings.Contains(resp.Body, `"key":"`+tt.key+`"`) {
				t.Errorf("202 body %s; want the key", resp.Body)
			}
		})
	}
}

// Every refusal is logged with the source and the delivery id it claims;
// no log line holds the body or a signature.
func TestWebhookRefusalsAreLogged(t *testing.T) {
	f := newHookFixture(t, nil)
	headers := webhooksender.StandardWebhooks("msg_logged", hookNow, []byte(swBody), []byte("not-the-key-not-the-key-!"))
	f.h.Handle(context.Background(), hook("acme", headers, swBody))
	var line map[string]any
	if err := json.Unmarshal(f.logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", f.logs, err)
	}
	for k, want := range map[string]any{"msg": "webhook", "level": "WARN", "source": "acme", "delivery_id": "msg_logged", "verified": false,
		"outcome": "refused", "code": "SIGNATURE_MISMATCH", "status": float64(401)} {
		if line[k] != want {
			t.Errorf("log %s = %v; want %v", k, line[k], want)
		}
	}
	for _, secret := range []string{"invoice.paid", headers["webhook-signature"][3:], base64.StdEncoding.EncodeToString(hookKey)} {
		if strings.Contains(f.logs.String(), secret) {
			t.Errorf("the log line holds %q", secret)
		}
	}
}

func TestNewNeedsWholeWebhooks(t *testing.T) {
	engine, _ := oncely.New(memstore.New(), oncely.Options{})
	if _, err := receiving.New(receiving.Options{Engine: engine, Queue: &queue{}, MaxMessageBytes: 4096}); err == nil {
		t.Error("New accepted Options without Sources")
	}
	srcs, _ := inbound.ParseSources(hookSecrets)
	if _, err := receiving.New(receiving.Options{Engine: engine, Sources: staticSources{s: srcs}, Queue: &queue{}, MaxMessageBytes: 4096}); err == nil {
		t.Error("New accepted Options without Proof: its envelopes would be refused after the cutover")
	}
}

// What the log line's error says: the internal cause where the caller gets
// a fixed sentence, else what the caller is told; a 405 names the method.
func TestWebhookResultErrors(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", 2100) + `"}`
	for _, tt := range []struct {
		name      string
		req       events.APIGatewayV2HTTPRequest
		mod       func(*receiving.Options)
		err       string
		allow     string
		errInBody bool
	}{
		{name: "another method", req: hook("acme", nil, "", func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.HTTP.Method = "GET" }),
			err: "GET is not allowed on /webhooks/<source>; use POST", allow: "POST", errInBody: true},
		{name: "unknown source", req: hook("nobody", signedSW("msg_1", swBody, hookNow), swBody), err: `no webhook source "nobody" is configured`, errInBody: true},
		{name: "body over the limit", req: hook("acme", signedSW("msg_1", big, hookNow), big), err: "the body was refused before verification"},
		{name: "sources unreadable", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Sources = staticSources{err: idem.Transient(errors.New("secretsmanager down"))}
		}, err: "secretsmanager down"},
		{name: "queue misconfigured", req: hook("acme", signedSW("msg_1", swBody, hookNow), swBody), mod: func(o *receiving.Options) {
			o.Queue = &queue{err: idem.Permanent(errors.New("sqs: access denied"))}
		}, err: "sqs: access denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newHookFixture(t, tt.mod)
			resp, res := f.h.Handle(context.Background(), tt.req)
			var p struct {
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
				t.Fatal(err)
			}
			if res.Error != tt.err || resp.Headers["Allow"] != tt.allow || (p.Detail == tt.err) != tt.errInBody {
				t.Errorf("got error %q, Allow %q, detail %q; want error %q, Allow %q, the error as the detail: %v", res.Error, resp.Headers["Allow"], p.Detail, tt.err, tt.allow, tt.errInBody)
			}
		})
	}
}

// countingStore counts reservations: the receiving route must make none.
type countingStore struct {
	*memstore.Store
	n atomic.Int64
}

func (s *countingStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	s.n.Add(1)
	return s.Store.Reserve(ctx, r)
}

// A 401 tells the caller the class of the problem and nothing more: not
// how many secrets the source has, nor how many signatures it sent, nor
// which header; the log line keeps that for the operator.
func TestRefusalsTeachAnUnauthenticatedCallerNothing(t *testing.T) {
	wrong := webhooksender.StandardWebhooks("msg_1", hookNow, []byte(swBody), []byte("not-the-key-not-the-key-!"), []byte("another-wrong-key-0123456"))
	for _, tt := range []struct {
		name    string
		headers map[string]string
		detail  string
		logged  string
	}{
		{"missing", map[string]string{}, "the delivery is not signed: a signature header is missing", "missing header"},
		{"malformed", map[string]string{"webhook-id": "msg_1", "webhook-timestamp": "soon", "webhook-signature": "v1,xx"}, "the delivery's signature headers cannot be read", "webhook-timestamp"},
		{"mismatched", wrong, "the delivery's signature does not match", "2 signature(s), 1 secret(s)"},
		{"stale", signedSW("msg_1", swBody, hookNow.Add(-time.Hour)), "the delivery's signed time is outside the tolerance", "before now"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newHookFixture(t, nil)
			resp, _ := f.h.Handle(context.Background(), hook("acme", tt.headers, swBody))
			var p struct {
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 401 || p.Detail != tt.detail {
				t.Errorf("got %d %q; want 401 %q", resp.StatusCode, p.Detail, tt.detail)
			}
			if !strings.Contains(f.logs.String(), tt.logged) {
				t.Errorf("the log line lacks the detail %q: %s", tt.logged, f.logs.String())
			}
		})
	}
}

package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/httpapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

type fixture struct {
	h     *httpapi.Handler
	store *countingStore
	calls atomic.Int64
}

// countingStore counts store calls: refused requests must make none.
type countingStore struct {
	*memstore.Store
	n atomic.Int64
}

func (s *countingStore) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	s.n.Add(1)
	return s.Store.Reserve(ctx, r)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{store: &countingStore{Store: memstore.New()}}
	engine, err := idem.New(idem.Options{Store: f.store, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler),
		Retry: idem.RetryPolicy{AttemptsPerDelivery: 1, AttemptsPerKey: 0}})
	if err != nil {
		t.Fatal(err)
	}
	act := func(ctx context.Context, ev action.Event) (action.Result, error) {
		f.calls.Add(1)
		var b struct{ Reply string }
		_ = json.Unmarshal(ev.Body, &b)
		switch b.Reply {
		case "transient":
			return action.Result{}, idem.Transient(errors.New("503 from downstream"))
		case "retry-after":
			return action.Result{}, idem.TransientAfter(errors.New("429 from downstream"), 120*time.Second)
		case "permanent":
			return action.Result{}, idem.PermanentCode("HTTP_404", errors.New("404 from downstream"))
		}
		return action.Result{Status: 201, Body: []byte(`{"ok":true}`)}, nil
	}
	f.h, err = httpapi.New(httpapi.Options{Engine: engine, Action: act, MaxBodyBytes: 1024, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func request(mods ...func(*events.APIGatewayV2HTTPRequest)) events.APIGatewayV2HTTPRequest {
	r := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /events", RawPath: "/events",
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": "order-7f3a9c21"},
		Body:    `{"id":"release-42","action":"notify"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: "POST /events", RequestID: "r1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events"}},
	}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func route(key, method, path, stage string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) {
		r.RouteKey, r.RequestContext.RouteKey, r.RawPath = key, key, path
		r.RequestContext.HTTP.Method, r.RequestContext.HTTP.Path, r.RequestContext.Stage = method, path, stage
	}
}

func body(b string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.Body = b }
}

func header(k, v string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.Headers[k] = v }
}

// TestResponses is the adapter's table: status, problem code, headers, and
// whether the request reached the store.
func TestResponses(t *testing.T) {
	tests := []struct {
		name       string
		req        events.APIGatewayV2HTTPRequest
		status     int
		code       string
		headers    map[string]string
		storeCalls bool
	}{
		{"success", request(), 201, "", nil, true},
		{"the $default route with the right method and path", request(route("$default", "POST", "/events", "$default")), 201, "", nil, true},
		{"a named stage's prefix is not part of the path", request(route("$default", "POST", "/prod/events", "prod")), 201, "", nil, true},
		{"another method on /events", request(route("GET /events", "GET", "/events", "$default")), 405, "METHOD_NOT_ALLOWED", map[string]string{"Allow": "POST"}, false},
		{"POST through an ANY route", request(route("ANY /events", "POST", "/events", "$default")), 201, "", nil, true},
		{"GET through an ANY route", request(route("ANY /events", "GET", "/events", "$default")), 405, "METHOD_NOT_ALLOWED", map[string]string{"Allow": "POST"}, false},
		{"another method through $default", request(route("$default", "GET", "/events", "$default")), 405, "METHOD_NOT_ALLOWED", map[string]string{"Allow": "POST"}, false},
		{"another route", request(route("POST /other", "POST", "/other", "$default")), 404, "NOT_FOUND", nil, false},
		{"SAM's sample event path", request(route("$default", "POST", "/path/to/resource", "$default")), 404, "NOT_FOUND", nil, false},
		{"a stage name alone is not the route", request(route("$default", "POST", "/events", "events")), 404, "NOT_FOUND", nil, false},
		{"too large", request(body(`{"id":"x","pad":"` + strings.Repeat("a", 2000) + `"}`)), 413, "TOO_LARGE", nil, false},
		{"too large once base64 decoded", request(body(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", 2000)))), func(r *events.APIGatewayV2HTTPRequest) { r.IsBase64Encoded = true }), 413, "TOO_LARGE", nil, false},
		{"XML", request(header("content-type", "application/xml")), 415, "UNSUPPORTED_MEDIA_TYPE", nil, false},
		{"a form", request(header("content-type", "application/x-www-form-urlencoded")), 415, "UNSUPPORTED_MEDIA_TYPE", nil, false},
		{"multipart", request(header("content-type", "multipart/form-data; boundary=x")), 415, "UNSUPPORTED_MEDIA_TYPE", nil, false},
		{"json with a charset", request(header("content-type", "application/json; charset=utf-8")), 201, "", nil, true},
		{"a +json type", request(header("content-type", "application/cloudevents+json")), 201, "", nil, true},
		{"no content type", request(func(r *events.APIGatewayV2HTTPRequest) { delete(r.Headers, "content-type") }), 201, "", nil, true},
		{"declared JSON but not JSON", request(body("id=1")), 400, "INVALID_PAYLOAD", nil, false},
		{"no key", request(func(r *events.APIGatewayV2HTTPRequest) { delete(r.Headers, "idempotency-key") }), 400, "INVALID_KEY", nil, false},
		{"transient: 503, released", request(body(`{"reply":"transient"}`)), 503, "TRANSIENT_FAILURE", map[string]string{"Retry-After": "1"}, true},
		{"downstream Retry-After passed on", request(body(`{"reply":"retry-after"}`)), 503, "TRANSIENT_FAILURE", map[string]string{"Retry-After": "120"}, true},
		{"permanent: 422", request(body(`{"reply":"permanent"}`)), 422, "HTTP_404", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			resp, res := f.h.Handle(context.Background(), tt.req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s); want %d", resp.StatusCode, resp.Body, tt.status)
			}
			if tt.code != "" {
				var p struct{ Code, Detail string }
				if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || p.Code != tt.code || p.Detail == "" || resp.Headers["Content-Type"] != "application/problem+json" {
					t.Errorf("body %s (%v); want a problem+json with code %s and a detail", resp.Body, resp.Headers, tt.code)
				}
				if string(res.Code) != tt.code {
					t.Errorf("result code %s; want %s", res.Code, tt.code)
				}
			}
			for k, v := range tt.headers {
				if resp.Headers[k] != v {
					t.Errorf("header %s %q; want %q", k, resp.Headers[k], v)
				}
			}
			if got := f.store.n.Load() > 0; got != tt.storeCalls {
				t.Errorf("store called %v; want %v", got, tt.storeCalls)
			}
		})
	}
}

// A key released after a transient failure runs again on the next request.
func TestTransientReleasesTheKey(t *testing.T) {
	f := newFixture(t)
	failing := request(body(`{"reply":"transient"}`))
	for i := range 3 {
		if resp, _ := f.h.Handle(context.Background(), failing); resp.StatusCode != 503 {
			t.Fatalf("attempt %d: %d; want 503", i+1, resp.StatusCode)
		}
	}
	if n := f.calls.Load(); n != 3 {
		t.Errorf("executions %d; want 3: every retry with the same key runs again", n)
	}
}

func TestScope(t *testing.T) {
	iam := func(arn string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
		return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}
	}
	tests := []struct {
		name string
		auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want string
	}{
		{"none", nil, "anonymous"},
		{"jwt", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "user-1"}}}, "jwt:user-1"},
		{"iam user", iam("arn:aws:iam::111122223333:user/ci"), "iam:arn:aws:iam::111122223333:user/ci"},
		{"assumed role: by role, not session", iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"another session of the same role", iam("arn:aws:sts::111122223333:assumed-role/Publisher/task-42"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"lambda authorizer", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"principalId": "tenant-9"}}, "lambda:tenant-9"},
		{"an authorizer with no identity", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}, "anonymous"},
	}
	for _, tt := range tests {
		r := request(func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.Authorizer = tt.auth })
		if got := httpapi.Scope(r); got != tt.want {
			t.Errorf("%s: Scope = %q; want %q", tt.name, got, tt.want)
		}
	}
}

// lambdaIDHandler adds the invocation's request id from ctx, as
// aws-lambda-go's lambdacontext.NewLogHandler does (it writes to stdout,
// which a test cannot read).
type lambdaIDHandler struct{ slog.Handler }

func (h lambdaIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

// The request's log line carries one requestId, the Lambda invocation's:
// the API Gateway request id has a name of its own. Two requestId members
// in one JSON line leave a reader to guess, and under Lambda Managed
// Instances that id is what tells interleaved invocations apart.
func TestTheLogLineHasOneRequestIdTheInvocations(t *testing.T) {
	var buf strings.Builder
	engine, err := idem.New(idem.Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Options{Engine: engine, Logger: slog.New(lambdaIDHandler{slog.NewJSONHandler(&buf, nil)}),
		Action: func(context.Context, action.Event) (action.Result, error) { return action.Result{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "lambda-req-1"})
	h.Handle(ctx, request(func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.RequestID = "apigw-req-1" }))
	line := strings.TrimSpace(buf.String())
	if n := strings.Count(line, `"requestId":`); n != 1 {
		t.Fatalf("the log line has %d requestId members; want 1:\n%s", n, line)
	}
	var got struct{ RequestID, APIRequestID string }
	if err := json.Unmarshal([]byte(line), &got); err != nil || got.RequestID != "lambda-req-1" || got.APIRequestID != "apigw-req-1" {
		t.Errorf("requestId %q, apiRequestId %q (%v); want the invocation's and the API's:\n%s", got.RequestID, got.APIRequestID, err, line)
	}
}

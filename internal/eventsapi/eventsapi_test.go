package eventsapi_test

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

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

type fixture struct {
	h      *eventsapi.Handler
	engine *idem.Engine
	store  *countingStore
	calls  atomic.Int64
	logs   strings.Builder // the engine's and the adapter's, through one handler
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
	logger := slog.New(slog.NewJSONHandler(&f.logs, nil))
	engine, err := idem.New(idem.Options{Store: f.store, Lease: time.Minute, Logger: logger, SentPause: 4 * time.Second,
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
		case "sent":
			return action.Result{}, idem.TransientSent(errors.New("POST timed out once written"))
		case "retry-after":
			return action.Result{}, idem.TransientAfter(errors.New("429 from downstream"), 120*time.Second)
		case "permanent":
			return action.Result{}, idem.PermanentCode("HTTP_404", errors.New("404 from downstream"))
		case "leaky":
			return action.Result{}, errors.New("notify: POST to " + leakyURL + ": tls: handshake failure")
		case "panic":
			panic("the secret at " + leakyURL)
		}
		return action.Result{Status: 201, Body: []byte(`{"ok":true}`)}, nil
	}
	f.engine = engine
	f.h, err = eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Action: act, MaxBodyBytes: 1024, JWTIssuer: issuer, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// After a request that may have reached the receiver, the caller is asked
// to wait the engine's pause (the receiver may still be acting on it);
// after one that cannot have, the usual second.
func TestSentFailureAsksTheCallerToWait(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct{ reply, want string }{{"sent", "4"}, {"transient", "1"}} {
		resp, _ := f.h.Handle(context.Background(), request(body(`{"reply":"`+tt.reply+`"}`), header("idempotency-key", "order-7f3a9c21-"+tt.reply)))
		if resp.StatusCode != 503 || resp.Headers["Retry-After"] != tt.want {
			t.Errorf("%s: %d Retry-After %q; want 503 Retry-After %s", tt.reply, resp.StatusCode, resp.Headers["Retry-After"], tt.want)
		}
	}
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

const issuer = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Tenants"

func jwt(claims map[string]string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
}

func iam(arn string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}
}

func cognito(pool, id string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	a := iam("arn:aws:sts::111122223333:assumed-role/Cognito_TenantsAuth_Role/CognitoIdentityCredentials")
	a.IAM.CognitoIdentity = events.APIGatewayV2HTTPRequestContextAuthorizerCognitoIdentity{IdentityPoolID: pool, IdentityID: id, AMR: []string{"authenticated"}}
	return a
}

func authorizer(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.Authorizer = a }
}

func TestScope(t *testing.T) {
	const pool = "us-east-1:0f6b2c1e-0000-4000-8000-000000000001"
	tests := []struct {
		name string
		auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want string // "" for a request refused with 401
	}{
		{"none", nil, "anonymous"},
		{"jwt from the configured issuer: as before", jwt(map[string]string{"sub": "user-1", "iss": issuer}), "jwt:user-1"},
		{"jwt from another issuer: qualified by it", jwt(map[string]string{"sub": "user-1", "iss": "https://evil.example"}), `jwt@"https://evil.example":user-1`},
		{"an issuer and subject that would spell another pair's scope", jwt(map[string]string{"sub": `x":user-1`, "iss": `https://evil.example`}), `jwt@"https://evil.example":x":user-1`},
		{"jwt without sub", jwt(map[string]string{"iss": issuer, "client_id": "tenant-b"}), ""},
		{"jwt without claims", jwt(nil), ""},
		{"iam user", iam("arn:aws:iam::111122223333:user/ci"), "iam:arn:aws:iam::111122223333:user/ci"},
		{"assumed role: by role, not session", iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"another session of the same role", iam("arn:aws:sts::111122223333:assumed-role/Publisher/task-42"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"cognito identity pool: by identity, not the pool's role", cognito(pool, "us-east-1:aaaaaaaa-0000-4000-8000-00000000000a"), "cognito:" + pool + "/us-east-1:aaaaaaaa-0000-4000-8000-00000000000a"},
		{"iam without a principal", iam(""), ""},
		{"lambda authorizer", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"principalId": "tenant-9"}}, "lambda:tenant-9"},
		{"lambda authorizer without principalId", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"tenant": "9"}}, ""},
		{"an authorizer with no identity", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}, ""},
	}
	for _, tt := range tests {
		got, ok := apigw.Scope(request(authorizer(tt.auth)), issuer)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("%s: Scope = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}
}

// leakyURL is in the errors of the "leaky" and "panic" replies: a host, a
// user's password, a token. No caller may ever see any of it.
const leakyURL = "https://deploy:hunter2@10.0.3.7:8443/hook?token=s3cr3t"

// TestStoredFailuresReachCallersAsCodeAndSentence: a stored failure's
// problem, first answered and replayed, holds its code and the fixed
// sentence; the detail is in the request's log line.
func TestStoredFailuresReachCallersAsCodeAndSentence(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		reply, key string
		code       idem.Code
	}{{"leaky", "leaky-0001", idem.CodePermanentFailure}, {"panic", "panic-0001", idem.CodePanic}} {
		req := request(header("idempotency-key", tt.key), body(`{"id":"x1","action":"notify","reply":"`+tt.reply+`"}`))
		first, _ := f.h.Handle(context.Background(), req)
		replay, _ := f.h.Handle(context.Background(), req)
		var p struct{ Code, Detail string }
		_ = json.Unmarshal([]byte(first.Body), &p)
		if first.StatusCode != 422 || p.Code != string(tt.code) || p.Detail != idem.Sentence(tt.code) {
			t.Errorf("%s: %d %s; want 422 %s with its sentence", tt.reply, first.StatusCode, first.Body, tt.code)
		}
		for _, leak := range []string{"10.0.3.7", "hunter2", "s3cr3t", "deploy", "8443"} {
			if strings.Contains(first.Body, leak) || strings.Contains(replay.Body, leak) {
				t.Errorf("%s: a caller sees %q: %s / %s", tt.reply, leak, first.Body, replay.Body)
			}
		}
		if replay.Body != first.Body || replay.Headers["Idempotent-Replayed"] != "true" {
			t.Errorf("%s: replay %s %v; want the first answer byte for byte, marked replayed", tt.reply, replay.Body, replay.Headers)
		}
	}
	var found int
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var l struct{ Msg, Key, Error string }
		_ = json.Unmarshal([]byte(line), &l)
		if l.Msg == "request" && strings.Contains(l.Error, "10.0.3.7") && strings.HasSuffix(l.Key, "-0001") {
			found++
		}
	}
	if found != 2 {
		t.Errorf("%d request lines hold the detail with the key; want 2 (the first answers):\n%s", found, f.logs.String())
	}
}

// TestFailuresStoredBeforeReplayAsStored: a record written by an earlier
// version, its detail in the message, replays exactly as it always did.
func TestFailuresStoredBeforeReplayAsStored(t *testing.T) {
	f := newFixture(t)
	req := request(header("idempotency-key", "stored-before-1"))
	scope, _ := apigw.Scope(req, issuer)
	key := apigw.ScopedKey(scope, "stored-before-1")
	r, err := idem.NewRequest(key, []byte(req.Body))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, _, err := f.store.Reserve(context.Background(), idem.Reservation{Key: key, Fingerprint: r.Fingerprint, Token: "old-owner",
		Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	old := "notify: POST to https://10.0.3.7:8443: tls: handshake failure"
	if err := f.store.Fail(context.Background(), idem.Finish{Key: key, Token: "old-owner", Now: now, Attempts: 1,
		ExpiresAt: now.Add(time.Hour), ErrorCode: idem.CodePermanentFailure, ErrorMessage: old}); err != nil {
		t.Fatal(err)
	}
	resp, _ := f.h.Handle(context.Background(), req)
	want := `{"type":"urn:oncely:problem:permanent_failure","title":"Unprocessable Content","status":422,"detail":"` + old + `","code":"PERMANENT_FAILURE"}`
	if resp.StatusCode != 422 || resp.Body != want || resp.Headers["Idempotent-Replayed"] != "true" || f.calls.Load() != 0 {
		t.Errorf("got %d %s %v (action calls %d);\nwant 422 %s, replayed, the action not run", resp.StatusCode, resp.Body, resp.Headers, f.calls.Load(), want)
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
	h, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Logger: slog.New(lambdaIDHandler{slog.NewJSONHandler(&buf, nil)}),
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

// TestIsScopedKey: operators tell an API request's key from an event's by
// the form ScopedKey gives (oncelyctl's re-send reminder depends on it).
func TestIsScopedKey(t *testing.T) {
	if k := apigw.ScopedKey("jwt:user-1", "order-7f3a9c21"); !apigw.IsScopedKey(k) {
		t.Errorf("IsScopedKey(%q) = false, want true", k)
	}
	if k := "evt:order-1:notify"; apigw.IsScopedKey(k) {
		t.Errorf("IsScopedKey(%q) = true, want false", k)
	}
}

// Stored keys are api:<16 hex of SHA-256(scope)>:<key>, and the scope is a
// caller's key space: a caller whose identity did not change must find the
// records it stored before this release. The digests below were computed
// from the scope strings of the release before identities were tightened
// (jwt:<sub> with no issuer check, iam:<role>, lambda:<principalId>,
// anonymous); a change to any scope string of these callers fails here.
func TestRecordsStoredUnderTodaysScopesReplay(t *testing.T) {
	tests := []struct {
		name   string
		auth   *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		stored string
	}{
		{"jwt of the configured issuer", jwt(map[string]string{"sub": "tenant-a", "iss": issuer}), "api:cc83083ab1c48e9c:order-7f3a9c21"},
		{"iam role", iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), "api:9bb35b3a524d415e:order-7f3a9c21"},
		{"lambda authorizer", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"principalId": "tenant-9"}}, "api:f2ee4b3ade3f0fe6:order-7f3a9c21"},
		{"none", nil, "api:2f183a4e64493af3:order-7f3a9c21"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			// The record as the previous release stored it.
			req := request(authorizer(tt.auth))
			r, err := idem.NewRequest(tt.stored, []byte(req.Body))
			if err != nil {
				t.Fatal(err)
			}
			if out := f.engine.DoWork(context.Background(), r, func(context.Context) ([]byte, idem.Effects, error) {
				return action.Encode(action.Result{Status: 201, Body: []byte(`{"stored":"before"}`)}), nil, nil
			}); out.Err != nil {
				t.Fatal(out.Err)
			}
			resp, res := f.h.Handle(context.Background(), req)
			if resp.StatusCode != 201 || resp.Body != `{"stored":"before"}` || resp.Headers["Idempotent-Replayed"] != "true" || res.Key != tt.stored {
				t.Errorf("got %d %q %v under key %q; want the stored 201 replayed under %q", resp.StatusCode, resp.Body, resp.Headers, res.Key, tt.stored)
			}
			if n := f.calls.Load(); n != 0 {
				t.Errorf("the action ran %d times; want 0 (a replay)", n)
			}
		})
	}
}

// A request whose authorizer names nobody is refused before any store call:
// the exact request tenant B sent to read tenant A's reply (a valid token of
// the configured issuer, without sub, with A's key and body) gets 401.
func TestNoIdentityIsRefusedBeforeTheStore(t *testing.T) {
	f := newFixture(t)
	resp, res := f.h.Handle(context.Background(), request(authorizer(jwt(map[string]string{"iss": issuer, "client_id": "tenant-b"}))))
	if resp.StatusCode != 401 || res.Code != idem.CodeNoIdentity || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Errorf("got %d %s %q; want 401 NO_IDENTITY problem", resp.StatusCode, res.Code, resp.Body)
	}
	if n := f.store.n.Load(); n != 0 {
		t.Errorf("store calls %d; want 0", n)
	}
}

// Two tenants sharing a sub under different issuers, and two identities of
// one Cognito pool, never share a key space.
func TestTenantsDoNotShareKeys(t *testing.T) {
	for name, pair := range map[string][2]*events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		"same sub, other issuer":     {jwt(map[string]string{"sub": "u-1", "iss": issuer}), jwt(map[string]string{"sub": "u-1", "iss": "https://other.example"})},
		"two identities of one pool": {cognito("us-east-1:pool", "us-east-1:a"), cognito("us-east-1:pool", "us-east-1:b")},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			for i, a := range pair {
				resp, _ := f.h.Handle(context.Background(), request(authorizer(a)))
				if resp.StatusCode != 201 || resp.Headers["Idempotent-Replayed"] != "" {
					t.Errorf("caller %d: %d %v; want its own 201, not a replay", i, resp.StatusCode, resp.Headers)
				}
			}
			if n := f.calls.Load(); n != 2 {
				t.Errorf("executions %d; want 2", n)
			}
		})
	}
}

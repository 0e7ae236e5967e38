package apigw_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/oncelytest"
)

// issuer is the JWT authorizer's configured issuer in every fixture.
const issuer = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Tenants"

// clientKey and reqBody are the request every test starts from.
const (
	clientKey = "order-7f3a9c21"
	reqBody   = `{"id":"release-42","action":"notify"}`
)

// countingStore is the real in-memory store, counting the calls that reach
// it: a request refused before the store makes none.
type countingStore struct {
	*oncelytest.Store
	calls atomic.Int64
}

func (s *countingStore) Reserve(ctx context.Context, r driver.Reservation) (driver.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.Reserve(ctx, r)
}

func (s *countingStore) TakeOver(ctx context.Context, prev driver.Record, r driver.Reservation) (driver.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.TakeOver(ctx, prev, r)
}

func (s *countingStore) Get(ctx context.Context, key string, now time.Time) (driver.Record, bool, error) {
	s.calls.Add(1)
	return s.Store.Get(ctx, key, now)
}

// fixture is a HandlerV2 on the in-memory store around fn, counting fn's
// executions.
type fixture struct {
	h     *apigw.HandlerV2
	store *countingStore
	calls atomic.Int64
}

type handlerFunc = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// quickRetry keeps the engine's in-call backoff short: its waits are real.
var quickRetry = oncely.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}

// newFixture builds the handler with the engine's options eo (a Logger
// discarding lines unless set) and the adapter's options o.
func newFixture(t *testing.T, eo oncely.Options, o apigw.Options, fn handlerFunc) *fixture {
	t.Helper()
	f := &fixture{store: &countingStore{Store: oncelytest.NewStore()}}
	if eo.Logger == nil {
		eo.Logger = slog.New(slog.DiscardHandler)
	}
	if eo.Retry == (oncely.RetryPolicy{}) {
		eo.Retry = quickRetry
	}
	engine, err := oncely.New(f.store, eo)
	if err != nil {
		t.Fatal(err)
	}
	if o.JWTIssuer == "" {
		o.JWTIssuer = issuer
	}
	f.h, err = apigw.NewV2(engine, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		f.calls.Add(1)
		resp, err := fn(ctx, req)
		return resp, nil, err
	}, o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// created answers 201 with a JSON body.
func created(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"ok":true}`}, nil
}

func (f *fixture) handle(t *testing.T, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, apigw.Result) {
	t.Helper()
	return f.h.Handle(context.Background(), req)
}

// request is a POST with the client key and reqBody, without an
// authorizer; mods change it.
func request(mods ...func(*events.APIGatewayV2HTTPRequest)) events.APIGatewayV2HTTPRequest {
	r := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /orders", RawPath: "/orders",
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": clientKey},
		Body:    reqBody,
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default", RouteKey: "POST /orders", RequestID: "r1",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders"}},
	}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func body(b string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.Body = b }
}

func base64Body(b string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.Body, r.IsBase64Encoded = b, true }
}

func header(k, v string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.Headers[k] = v }
}

func noHeader(k string) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { delete(r.Headers, k) }
}

func authorizer(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) func(*events.APIGatewayV2HTTPRequest) {
	return func(r *events.APIGatewayV2HTTPRequest) { r.RequestContext.Authorizer = a }
}

func jwt(claims map[string]string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
}

func iam(arn string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}
}

// cognitoRole is the role every identity of the test pool assumes.
const cognitoRole = "arn:aws:sts::111122223333:assumed-role/Cognito_TenantsAuth_Role/CognitoIdentityCredentials"

func cognito(pool, id string) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	a := iam(cognitoRole)
	a.IAM.CognitoIdentity = events.APIGatewayV2HTTPRequestContextAuthorizerCognitoIdentity{IdentityPoolID: pool, IdentityID: id, AMR: []string{"authenticated"}}
	return a
}

func lambdaAuth(ctx map[string]any) *events.APIGatewayV2HTTPRequestContextAuthorizerDescription {
	return &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: ctx}
}

// problemDoc is an RFC 9457 problem details document.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// checkProblem checks that resp is an application/problem+json document
// with status and code, its type, title and detail set, and returns it.
func checkProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, code string) problemDoc {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status %d (%s); want %d", resp.StatusCode, resp.Body, status)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/problem+json" {
		t.Errorf("Content-Type %q; want application/problem+json", ct)
	}
	var p problemDoc
	dec := json.NewDecoder(strings.NewReader(resp.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("body %q is not a problem document: %v", resp.Body, err)
	}
	if p.Status != status || p.Code != code || p.Type != "urn:oncely:problem:"+strings.ToLower(code) || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v; want status %d, code %s, its type, a title and a detail", p, status, code)
	}
	return p
}

// leakyURL is in the handler's errors: a host, a password, a token. No
// caller may ever see any of it.
const leakyURL = "https://deploy:hunter2@10.0.3.7:8443/hook?token=s3cr3t"

var leaks = []string{"10.0.3.7", "hunter2", "s3cr3t", "deploy", "8443"}

func checkNoLeak(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
	t.Helper()
	for _, leak := range leaks {
		if strings.Contains(resp.Body, leak) {
			t.Errorf("the caller sees %q: %s", leak, resp.Body)
		}
		for k, v := range resp.Headers {
			if strings.Contains(v, leak) {
				t.Errorf("the caller sees %q in header %s: %s", leak, k, v)
			}
		}
	}
}

// scopedKey is the key the store holds for req's caller and client key.
func scopedKey(t *testing.T, req events.APIGatewayV2HTTPRequest, ck string) string {
	t.Helper()
	scope, ok := apigw.Scope(req, issuer)
	if !ok {
		t.Fatal("the request has no scope")
	}
	return apigw.ScopedKey(scope, ck)
}

// storeSucceeded writes a SUCCEEDED record with result under key, as an
// earlier release would have, for body's fingerprint.
func storeSucceeded(t *testing.T, s driver.Store, key, reqBody string, result []byte) {
	t.Helper()
	r, err := oncely.NewRequest(key, []byte(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	if _, acquired, err := s.Reserve(ctx, driver.Reservation{Key: key, Fingerprint: r.Fingerprint, Token: "earlier-release",
		Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil || !acquired {
		t.Fatalf("reserve: acquired %v, %v", acquired, err)
	}
	if err := s.Complete(ctx, driver.Finish{Key: key, Token: "earlier-release", Now: now, Attempts: 1,
		ExpiresAt: now.Add(time.Hour), Result: result}); err != nil {
		t.Fatal(err)
	}
}

package router_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

const clientKey = "8e03978e-40d5-43e8-bc93-6894a57f9324"

// downKey is the key the downstream sees for clientKey sent by the caller
// in testdata (JWT sub user-123): scoped, so callers never collide there.
var downKey = apigw.ScopedKey("jwt:user-123", clientKey)

var apiBody = `{"id":"release-42","action":"notify"}`

func problemCode(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	var p struct {
		Code   string
		Status int
		Detail string
	}
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil || resp.Headers["Content-Type"] != "application/problem+json" || p.Status != resp.StatusCode {
		t.Fatalf("response %d %q (%v) is not a problem+json document", resp.StatusCode, resp.Body, resp.Headers)
	}
	if p.Detail == "" {
		t.Errorf("problem %s has no detail saying what is wrong", resp.Body)
	}
	return p.Code
}

func TestAPIFirstSuccessThenByteIdenticalReplay(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	first := h.api(ctx, apiRequest(t, clientKey, apiBody))
	if first.StatusCode != 200 || first.Headers["Idempotent-Replayed"] != "" || !contains(first.Body, `"delivered":true`) {
		t.Fatalf("first: %d %v %s; want 200 with the action's body", first.StatusCode, first.Headers, first.Body)
	}
	// Reordered keys are the same payload.
	replay := h.api(ctx, apiRequest(t, clientKey, `{"action":"notify","id":"release-42"}`))
	if replay.StatusCode != first.StatusCode || replay.Body != first.Body || replay.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("replay: %d %v %q; want %d %q with Idempotent-Replayed: true", replay.StatusCode, replay.Headers, replay.Body, first.StatusCode, first.Body)
	}
	if n := h.down.Count(downKey); n != 1 {
		t.Errorf("downstream deliveries %d; want 1", n)
	}
}

func TestAPIStatusCodes(t *testing.T) {
	ctx := context.Background()
	t.Run("missing key is 400", func(t *testing.T) {
		h := newHarness(t)
		resp := h.api(ctx, apiRequest(t, "", apiBody))
		if resp.StatusCode != 400 || problemCode(t, resp) != "INVALID_KEY" || !contains(resp.Body, "Idempotency-Key header is required") {
			t.Errorf("got %d %s; want 400 naming the header", resp.StatusCode, resp.Body)
		}
	})
	t.Run("invalid key is 400", func(t *testing.T) {
		h := newHarness(t)
		for _, key := range []string{"short", "has space in it", "slash/slash/slash"} {
			resp := h.api(ctx, apiRequest(t, key, apiBody))
			if resp.StatusCode != 400 || problemCode(t, resp) != "INVALID_KEY" {
				t.Errorf("key %q: got %d %s; want 400", key, resp.StatusCode, resp.Body)
			}
		}
		if h.down.Total() != 0 || h.counter.Total() != 0 {
			t.Errorf("a bad key reached the store or the downstream")
		}
	})
	t.Run("quoted key as in the draft is accepted", func(t *testing.T) {
		h := newHarness(t)
		if resp := h.api(ctx, apiRequest(t, `"`+clientKey+`"`, apiBody)); resp.StatusCode != 200 {
			t.Errorf("got %d %s; want 200", resp.StatusCode, resp.Body)
		}
	})
	t.Run("body not JSON is 400", func(t *testing.T) {
		h := newHarness(t)
		resp := h.api(ctx, apiRequest(t, clientKey, "id=1"))
		if resp.StatusCode != 400 || problemCode(t, resp) != "INVALID_PAYLOAD" {
			t.Errorf("got %d %s; want 400 INVALID_PAYLOAD", resp.StatusCode, resp.Body)
		}
	})
	t.Run("base64 body is decoded", func(t *testing.T) {
		h := newHarness(t)
		resp := h.api(ctx, apiRequest(t, clientKey, "eyJpZCI6InJlbGVhc2UtNDIiLCJhY3Rpb24iOiJub3RpZnkifQ==", func(r *events.APIGatewayV2HTTPRequest) { r.IsBase64Encoded = true }))
		if resp.StatusCode != 200 {
			t.Errorf("got %d %s; want 200", resp.StatusCode, resp.Body)
		}
	})
	t.Run("same key, different body is 422", func(t *testing.T) {
		h := newHarness(t)
		h.api(ctx, apiRequest(t, clientKey, apiBody))
		resp := h.api(ctx, apiRequest(t, clientKey, `{"id":"release-42","action":"notify","x":1}`))
		if resp.StatusCode != 422 || problemCode(t, resp) != "KEY_REUSED" {
			t.Errorf("got %d %s; want 422 KEY_REUSED", resp.StatusCode, resp.Body)
		}
	})
	t.Run("in flight is 409 with Retry-After", func(t *testing.T) {
		h := newHarness(t)
		// The receiver holds the first request until the duplicate has been
		// answered (a request that timed out would end its delivery: 503).
		hold := make(chan struct{})
		h.down.Script(downKey, fakewebhook.Reply{Hold: hold})
		done := make(chan events.APIGatewayV2HTTPResponse)
		go func() { done <- h.api(ctx, apiRequest(t, clientKey, apiBody)) }()
		waitFor(t, func() bool { return h.down.Count(downKey) > 0 })
		resp := h.api(ctx, apiRequest(t, clientKey, apiBody))
		close(hold)
		if resp.StatusCode != 409 || problemCode(t, resp) != "IN_PROGRESS" || resp.Headers["Retry-After"] == "" {
			t.Errorf("got %d %v %s; want 409 with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
		}
		if first := <-done; first.StatusCode != 200 {
			t.Errorf("the first request got %d", first.StatusCode)
		}
	})
	t.Run("permanent failure is a stored 4xx, replayed", func(t *testing.T) {
		h := newHarness(t)
		h.down.Script(downKey, fakewebhook.Reply{Status: 404})
		first := h.api(ctx, apiRequest(t, clientKey, apiBody))
		if first.StatusCode != 422 || problemCode(t, first) != "HTTP_404" {
			t.Fatalf("got %d %s; want 422 HTTP_404", first.StatusCode, first.Body)
		}
		replay := h.api(ctx, apiRequest(t, clientKey, apiBody))
		if replay.StatusCode != first.StatusCode || replay.Body != first.Body || replay.Headers["Idempotent-Replayed"] != "true" {
			t.Errorf("replay %d %q %v; want the same failure, marked replayed", replay.StatusCode, replay.Body, replay.Headers)
		}
		if n := h.down.Count(downKey); n != 1 {
			t.Errorf("deliveries %d; want 1", n)
		}
	})
	t.Run("transient failure is 503, nothing final stored, key released", func(t *testing.T) {
		h := newHarness(t)
		h.down.Script(downKey, fakewebhook.Reply{Status: 503, RetryAfter: "30"})
		resp := h.api(ctx, apiRequest(t, clientKey, apiBody))
		if resp.StatusCode != 503 || resp.Headers["Retry-After"] != "30" || problemCode(t, resp) != "TRANSIENT_FAILURE" {
			t.Fatalf("got %d %v %s; want 503 with Retry-After 30", resp.StatusCode, resp.Headers, resp.Body)
		}
		if again := h.api(ctx, apiRequest(t, clientKey, apiBody)); again.StatusCode != 200 || again.Headers["Idempotent-Replayed"] != "" {
			t.Errorf("retry after 503: %d %v; want a fresh 200", again.StatusCode, again.Headers)
		}
	})
	t.Run("stored failure is 422 whatever its code", func(t *testing.T) {
		h := newHarness(t)
		body := `{"id":"release-42","action":"notify","fail_code":"IN_PROGRESS"}`
		first := h.api(ctx, apiRequest(t, clientKey, body))
		replay := h.api(ctx, apiRequest(t, clientKey, body))
		if first.StatusCode != 422 || replay.StatusCode != 422 || replay.Body != first.Body {
			t.Errorf("got %d then %d (%q, %q); want 422 twice, identical", first.StatusCode, replay.StatusCode, first.Body, replay.Body)
		}
	})
	t.Run("store outage is 503", func(t *testing.T) {
		h := newHarness(t)
		h.ddb.EmulateFailure("internal_server")
		resp := h.api(ctx, apiRequest(t, clientKey, apiBody))
		if resp.StatusCode != 503 || problemCode(t, resp) != "STORE_UNAVAILABLE" {
			t.Errorf("got %d %s; want 503 STORE_UNAVAILABLE", resp.StatusCode, resp.Body)
		}
	})
}

func TestAPICallerScope(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	as := func(sub string) func(*events.APIGatewayV2HTTPRequest) {
		return func(r *events.APIGatewayV2HTTPRequest) {
			if sub == "" {
				r.RequestContext.Authorizer = nil
				return
			}
			r.RequestContext.Authorizer.JWT.Claims["sub"] = sub
		}
	}
	alice := h.api(ctx, apiRequest(t, clientKey, `{"id":"a","action":"notify"}`, as("alice")))
	bob := h.api(ctx, apiRequest(t, clientKey, `{"id":"b","action":"notify"}`, as("bob")))
	anon := h.api(ctx, apiRequest(t, clientKey, `{"id":"c","action":"notify"}`, as("")))
	for name, r := range map[string]events.APIGatewayV2HTTPResponse{"alice": alice, "bob": bob, "anonymous": anon} {
		if r.StatusCode != 200 || r.Headers["Idempotent-Replayed"] != "" {
			t.Errorf("%s: %d %v; want an independent first success (same key, other caller)", name, r.StatusCode, r.Headers)
		}
	}
	// Each caller replays its own result, never another's.
	if r := h.api(ctx, apiRequest(t, clientKey, `{"id":"b","action":"notify"}`, as("bob"))); r.Body != bob.Body || r.Headers["Idempotent-Replayed"] != "true" {
		t.Errorf("bob's replay %q; want his own %q", r.Body, bob.Body)
	}
	if r := h.api(ctx, apiRequest(t, clientKey, `{"id":"b","action":"notify"}`, as("alice"))); r.StatusCode != 422 {
		t.Errorf("alice sending bob's body under her key: %d; want 422 against her own record", r.StatusCode)
	}
	// The downstream sees three different keys: a de-duplicating webhook
	// must not merge the callers.
	for _, scope := range []string{"jwt:alice", "jwt:bob", "anonymous"} {
		if n := h.down.Count(apigw.ScopedKey(scope, clientKey)); n != 1 {
			t.Errorf("deliveries for %s's key %d; want 1", scope, n)
		}
	}
	if n := h.down.Count(clientKey); n != 0 {
		t.Errorf("the raw client key reached the downstream %d times; want 0", n)
	}
}

// SAM's own sample HTTP API event (sam local generate-event apigateway
// http-api-proxy: route $default, POST /path/to/resource), given an
// Idempotency-Key: not our route, so 404 and no store or webhook call.
func TestAPIOtherRoutesAreRefusedBeforeAnyWork(t *testing.T) {
	raw, err := os.ReadFile("testdata/sam-http-api-proxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var sample events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &sample); err != nil {
		t.Fatal(err)
	}
	sample.Headers["idempotency-key"] = clientKey
	sample.Headers["content-type"] = "application/json"
	sample.Body, sample.IsBase64Encoded = apiBody, false
	get := apiRequest(t, clientKey, apiBody, func(r *events.APIGatewayV2HTTPRequest) {
		r.RouteKey, r.RequestContext.RouteKey, r.RequestContext.HTTP.Method = "$default", "$default", "GET"
	})
	other := apiRequest(t, clientKey, apiBody, func(r *events.APIGatewayV2HTTPRequest) {
		r.RouteKey, r.RequestContext.RouteKey, r.RawPath = "POST /other", "POST /other", "/other"
	})
	samPayload, _ := json.Marshal(sample)
	for name, tc := range map[string]struct {
		payload []byte
		status  int
	}{"SAM sample": {samPayload, 404}, "GET /events": {get, 405}, "POST /other": {other, 404}} {
		h := newHarness(t)
		resp := h.api(context.Background(), tc.payload)
		if resp.StatusCode != tc.status || resp.Headers["Content-Type"] != "application/problem+json" {
			t.Errorf("%s: %d %v; want %d problem+json", name, resp.StatusCode, resp.Headers, tc.status)
		}
		if tc.status == 405 && resp.Headers["Allow"] != "POST" {
			t.Errorf("%s: Allow %q; want POST", name, resp.Headers["Allow"])
		}
		if h.counter.Total() != 0 || h.down.Total() != 0 {
			t.Errorf("%s: %d store calls, %d deliveries; want none", name, h.counter.Total(), h.down.Total())
		}
	}
}

package apigw_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/driver"
)

const testMaxBody = 64

// TestRequestsRefusedBeforeTheStore: a request without a valid key, a
// caller, or an acceptable body gets its problem; neither the store nor the
// handler sees it.
func TestRequestsRefusedBeforeTheStore(t *testing.T) {
	tests := []struct {
		name   string
		req    events.APIGatewayV2HTTPRequest
		status int
		code   string
	}{
		{"no Idempotency-Key header", request(noHeader("idempotency-key")), 400, "INVALID_KEY"},
		{"an empty Idempotency-Key", request(header("idempotency-key", "")), 400, "INVALID_KEY"},
		{"a key of 7 characters", request(header("idempotency-key", "order-7")), 400, "INVALID_KEY"},
		{"a key of 101 characters", request(header("idempotency-key", strings.Repeat("k", 101))), 400, "INVALID_KEY"},
		{"a key with a space", request(header("idempotency-key", "order 7f3a9c21")), 400, "INVALID_KEY"},
		{"a key with a slash", request(header("idempotency-key", "order/7f3a9c21")), 400, "INVALID_KEY"},
		{"a key with a non-ASCII letter", request(header("idempotency-key", "ordér-7f3a9c21")), 400, "INVALID_KEY"},
		{"a body that is not JSON", request(body("id=1")), 400, "INVALID_PAYLOAD"},
		{"an empty body", request(body("")), 400, "INVALID_PAYLOAD"},
		{"two JSON documents", request(body(`{"a":1}{"b":2}`)), 400, "INVALID_PAYLOAD"},
		{"invalid base64", request(base64Body("not base64!")), 400, "INVALID_PAYLOAD"},
		{"base64 of a body that is not JSON", request(base64Body(base64.StdEncoding.EncodeToString([]byte("id=1")))), 400, "INVALID_PAYLOAD"},
		{"a JWT without sub", request(authorizer(jwt(map[string]string{"iss": issuer, "client_id": "tenant-b"}))), 401, "NO_IDENTITY"},
		{"a JWT without claims", request(authorizer(jwt(nil))), 401, "NO_IDENTITY"},
		{"IAM without a principal", request(authorizer(iam(""))), 401, "NO_IDENTITY"},
		{"a Lambda authorizer without principalId", request(authorizer(lambdaAuth(map[string]any{"tenant": "9"}))), 401, "NO_IDENTITY"},
		{"a Lambda authorizer with an empty principalId", request(authorizer(lambdaAuth(map[string]any{"principalId": ""}))), 401, "NO_IDENTITY"},
		{"an authorizer that names no kind", request(authorizer(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{})), 401, "NO_IDENTITY"},
		{"a body over MaxBodyBytes", request(body(`{"pad":"` + strings.Repeat("a", testMaxBody) + `"}`)), 413, "TOO_LARGE"},
		{"a base64 body over MaxBodyBytes once decoded", request(base64Body(base64.StdEncoding.EncodeToString([]byte(`{"pad":"` + strings.Repeat("a", testMaxBody) + `"}`)))), 413, "TOO_LARGE"},
		{"XML", request(header("content-type", "application/xml")), 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"text, the header named in another case", request(noHeader("content-type"), header("Content-Type", "text/plain")), 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"a form", request(header("content-type", "application/x-www-form-urlencoded")), 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"a content type that does not parse", request(header("content-type", "application/json; =")), 415, "UNSUPPORTED_MEDIA_TYPE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{MaxBodyBytes: testMaxBody}, created)
			resp, res := f.handle(t, tt.req)
			checkProblem(t, resp, tt.status, tt.code)
			if resp.Headers[apigw.HeaderReplayed] != "" {
				t.Errorf("a refusal is marked replayed: %v", resp.Headers)
			}
			if string(res.Code) != tt.code || res.Label != driver.LabelPoison || res.Replayed {
				t.Errorf("result %+v; want code %s, label poison, not replayed", res, tt.code)
			}
			if n := f.store.calls.Load(); n != 0 {
				t.Errorf("store calls %d; want 0", n)
			}
			if n := f.calls.Load(); n != 0 {
				t.Errorf("handler runs %d; want 0", n)
			}
		})
	}
}

// TestRequestsAccepted: the edges of the same checks, on the accepted side.
func TestRequestsAccepted(t *testing.T) {
	atLimit := `{"pad":"` + strings.Repeat("a", testMaxBody-10) + `"}`
	if len(atLimit) != testMaxBody {
		t.Fatalf("atLimit is %d bytes", len(atLimit))
	}
	tests := []struct {
		name string
		req  events.APIGatewayV2HTTPRequest
	}{
		{"a key of 8 characters", request(header("idempotency-key", "order-78"))},
		{"a key of 100 characters", request(header("idempotency-key", strings.Repeat("k", 100)))},
		{"a key quoted as a structured-header string", request(header("idempotency-key", `"`+clientKey+`"`))},
		{"the header's name in any case", request(noHeader("idempotency-key"), header("IDEMPOTENCY-KEY", clientKey))},
		{"a key with every allowed punctuation", request(header("idempotency-key", "a:b_c-d:0123"))},
		{"a body of exactly MaxBodyBytes", request(body(atLimit))},
		{"a base64 body of exactly MaxBodyBytes once decoded", request(base64Body(base64.StdEncoding.EncodeToString([]byte(atLimit))))},
		{"JSON with a charset", request(header("content-type", "application/json; charset=utf-8"))},
		{"a +json type", request(header("content-type", "application/merge-patch+json"))},
		{"no content type", request(noHeader("content-type"))},
		{"a JSON scalar", request(body(`42`))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{MaxBodyBytes: testMaxBody}, created)
			resp, res := f.handle(t, tt.req)
			if resp.StatusCode != 201 || res.Label != driver.LabelExecuted || f.calls.Load() != 1 {
				t.Errorf("got %d %s (label %s, runs %d); want the handler's 201", resp.StatusCode, resp.Body, res.Label, f.calls.Load())
			}
		})
	}
}

// TestQuotedAndBareKeysAreOneKey: the quotes of a structured-header string
// are not part of the key.
func TestQuotedAndBareKeysAreOneKey(t *testing.T) {
	f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
	f.handle(t, request())
	resp, res := f.handle(t, request(header("idempotency-key", `"`+clientKey+`"`)))
	if !res.Replayed || resp.Headers[apigw.HeaderReplayed] != "true" || f.calls.Load() != 1 {
		t.Errorf("the quoted key: %d %v (runs %d); want the bare key's response replayed", resp.StatusCode, resp.Headers, f.calls.Load())
	}
}

// TestDefaultMaxBodyBytes: zero means 1 MiB.
func TestDefaultMaxBodyBytes(t *testing.T) {
	if apigw.DefaultMaxBodyBytes != 1<<20 {
		t.Errorf("DefaultMaxBodyBytes %d; want 1 MiB", apigw.DefaultMaxBodyBytes)
	}
	f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
	atLimit := `"` + strings.Repeat("a", apigw.DefaultMaxBodyBytes-2) + `"`
	if resp, _ := f.handle(t, request(body(atLimit))); resp.StatusCode != 201 {
		t.Errorf("a body of 1 MiB: %d %.200s; want 201", resp.StatusCode, resp.Body)
	}
	resp, _ := f.handle(t, request(header("idempotency-key", "order-over-limit"), body(atLimit+" ")))
	checkProblem(t, resp, 413, "TOO_LARGE")
}

package apigw_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/driver"
)

// replayed is want as a replay carries it: with Idempotent-Replayed: true.
func replayed(want events.APIGatewayV2HTTPResponse) events.APIGatewayV2HTTPResponse {
	h := map[string]string{apigw.HeaderReplayed: "true"}
	for k, v := range want.Headers {
		h[k] = v
	}
	want.Headers = h
	return want
}

// TestFirstSuccessIsReplayedByteForByte: the first success's status,
// headers (but hop-by-hop ones, Content-Length and the replay mark),
// cookies and body are what every retry gets, marked replayed; the first
// answer is that stored form too, unmarked. The handler runs once.
func TestFirstSuccessIsReplayedByteForByte(t *testing.T) {
	binary := []byte{0xff, 0x00, 0xfe, 'a', 0x80, '\n'}
	tests := []struct {
		name string
		resp events.APIGatewayV2HTTPResponse // the handler's
		want events.APIGatewayV2HTTPResponse // the first answer's
	}{
		{
			name: "headers, cookies and a JSON body with whitespace and HTML characters",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 201,
				Headers: map[string]string{
					"Content-Type": "application/vnd.api+json", "Location": "/orders/42", "X-Request-Id": "req-1", "cache-control": "no-store",
					"Connection": "close", "Keep-Alive": "timeout=5", "Transfer-Encoding": "chunked", "Upgrade": "h2c", "Te": "trailers",
					"Trailer": "X-Sum", "Proxy-Authenticate": "Basic", "Proxy-Authorization": "Basic eDp5",
					"content-length": "40", apigw.HeaderReplayed: "false",
				},
				Cookies: []string{"session=abc; Path=/; HttpOnly", "theme=dark"},
				Body:    `{"order": 42, "html": "<b>&amp;</b>", "u": "\u00e9é"}`},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 201,
				Headers: map[string]string{"Content-Type": "application/vnd.api+json", "Location": "/orders/42", "X-Request-Id": "req-1", "cache-control": "no-store"},
				Cookies: []string{"session=abc; Path=/; HttpOnly", "theme=dark"},
				Body:    `{"order": 42, "html": "<b>&amp;</b>", "u": "\u00e9é"}`},
		},
		{
			name: "no Content-Type: the stored form says application/json",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: `{"ok":true}`},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"ok":true}`},
		},
		{
			name: "a text body, surrounding whitespace kept",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, Body: " <hello> & \"bye\"\n"},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, Body: " <hello> & \"bye\"\n"},
		},
		{
			name: "a binary body round-trips through base64",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/octet-stream"},
				Body: base64.StdEncoding.EncodeToString(binary), IsBase64Encoded: true},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/octet-stream"},
				Body: base64.StdEncoding.EncodeToString(binary), IsBase64Encoded: true},
		},
		{
			name: "an empty 204",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 204, Headers: map[string]string{"ETag": `"v1"`}},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 204, Headers: map[string]string{"Content-Type": "application/json", "ETag": `"v1"`}},
		},
		{
			name: "a 4xx of the handler's is a response like any other",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 404, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: `{"title":"no such order"}`},
			want: events.APIGatewayV2HTTPResponse{StatusCode: 404, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: `{"title":"no such order"}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				return tt.resp, nil
			})
			first, res := f.handle(t, request())
			if diff := cmp.Diff(tt.want, first); diff != "" {
				t.Errorf("first answer (-want +got):\n%s", diff)
			}
			if res.Replayed || res.Label != driver.LabelExecuted {
				t.Errorf("first result %+v; want executed, not replayed", res)
			}
			for i := range 2 {
				replay, res := f.handle(t, request())
				if diff := cmp.Diff(replayed(tt.want), replay); diff != "" {
					t.Errorf("replay %d (-want +got):\n%s", i+1, diff)
				}
				if !res.Replayed || res.Label != driver.LabelReplayed {
					t.Errorf("replay %d result %+v; want replayed", i+1, res)
				}
			}
			if n := f.calls.Load(); n != 1 {
				t.Errorf("handler runs %d; want 1", n)
			}
		})
	}
}

// TestBinaryBodyBytesSurvive: the bytes a binary replay decodes to are
// the handler's.
func TestBinaryBodyBytesSurvive(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(255 - i)
	}
	f := newFixture(t, oncely.Options{}, apigw.Options{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: base64.StdEncoding.EncodeToString(all), IsBase64Encoded: true}, nil
	})
	f.handle(t, request())
	replay, _ := f.handle(t, request())
	got, err := base64.StdEncoding.DecodeString(replay.Body)
	if !replay.IsBase64Encoded || err != nil || !bytes.Equal(got, all) {
		t.Errorf("replay base64 %v, decoded %x (%v); want %x", replay.IsBase64Encoded, got, err, all)
	}
}

// TestResponseMarkedBase64ButNotIs422: a handler response whose body is
// marked base64 but is not cannot be stored: a permanent failure, not a
// corrupt record.
func TestResponseMarkedBase64ButNotIs422(t *testing.T) {
	f := newFixture(t, oncely.Options{}, apigw.Options{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "not base64!", IsBase64Encoded: true}, nil
	})
	resp, _ := f.handle(t, request())
	checkProblem(t, resp, 422, "PERMANENT_FAILURE")
	if again, _ := f.handle(t, request()); again.Body != resp.Body || again.Headers[apigw.HeaderReplayed] != "true" || f.calls.Load() != 1 {
		t.Errorf("retry %d %s %v (runs %d); want the 422 replayed", again.StatusCode, again.Body, again.Headers, f.calls.Load())
	}
}

// TestRecordsOfTodaysReleaseReplay: records in the envelope forms stored by
// the release before apigw (and the older HTML-escaped body form) replay
// their status, Content-Type and body exactly as before.
func TestRecordsOfTodaysReleaseReplay(t *testing.T) {
	tests := []struct {
		name   string
		auth   *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		stored string
		want   events.APIGatewayV2HTTPResponse
	}{
		{"json", nil, `{"status":201,"json":{"id":"release-42","ok":true}}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"release-42","ok":true}`}},
		{"json with whitespace and escapes inside, verbatim", jwt(map[string]string{"sub": "tenant-a", "iss": issuer}), `{"status":201,"json":{"a": [1, 2], "h": "\u003cb\u003e"}}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"a": [1, 2], "h": "\u003cb\u003e"}`}},
		{"a text body with its content type", iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), `{"status":200,"content_type":"text/plain","body":"plain <text> & more"}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "plain <text> & more"}},
		{"a binary body in base64", lambdaAuth(map[string]any{"principalId": "tenant-9"}), `{"status":200,"body_base64":"/wD+gA=="}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: "/wD+gA==", IsBase64Encoded: true}},
		{"the older HTML-escaped body", nil, `{"status":200,"body":"\u003cp\u003eHi \u0026 bye\u003c/p\u003e"}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: "<p>Hi & bye</p>"}},
		{"the older body holding JSON text", nil, `{"status":202,"body":"{\"queued\":true}"}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 202, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"queued":true}`}},
		{"an empty body", nil, `{"status":204}`,
			events.APIGatewayV2HTTPResponse{StatusCode: 204, Headers: map[string]string{"Content-Type": "application/json"}, Body: ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
			req := request(authorizer(tt.auth))
			storeSucceeded(t, f.store.Store, scopedKey(t, req, clientKey), reqBody, []byte(tt.stored))
			resp, res := f.handle(t, req)
			if diff := cmp.Diff(replayed(tt.want), resp); diff != "" {
				t.Errorf("replay (-want +got):\n%s", diff)
			}
			if !res.Replayed || f.calls.Load() != 0 {
				t.Errorf("result %+v, handler runs %d; want a replay, no run", res, f.calls.Load())
			}
		})
	}
}

// TestRecordStoredByEngineRunReplays: a result the engine stored for the
// scoped key (the way the release before apigw wrote its records) is what
// the adapter replays.
func TestRecordStoredByEngineRunReplays(t *testing.T) {
	f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
	engine, err := oncely.New(f.store.Store, oncely.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := request(authorizer(jwt(map[string]string{"sub": "tenant-a", "iss": issuer})))
	r, err := oncely.NewRequest(scopedKey(t, req, clientKey), []byte(req.Body))
	if err != nil {
		t.Fatal(err)
	}
	if out := engine.Run(context.Background(), r, func(context.Context) ([]byte, oncely.Effects, error) {
		return []byte(`{"status":201,"json":{"stored":"before"}}`), nil, nil
	}); out.Err != nil {
		t.Fatal(out.Err)
	}
	resp, _ := f.handle(t, req)
	if resp.StatusCode != 201 || resp.Body != `{"stored":"before"}` || resp.Headers[apigw.HeaderReplayed] != "true" || f.calls.Load() != 0 {
		t.Errorf("got %d %s %v (runs %d); want the stored 201 replayed", resp.StatusCode, resp.Body, resp.Headers, f.calls.Load())
	}
}

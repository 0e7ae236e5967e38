package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// roundTripFunc records what the gate forwards.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An answer the gate forwards can be sent again: net/http resends a POST on
// a fresh connection only when nothing of it was written to a pooled one
// that turned out closed, and only with GetBody. The proxy's request has
// none, so without the gate's buffer such an answer was lost (a 502 from
// the proxy, which aws-lambda-go treats as fatal).
func TestExitGateForwardsAnswersThatCanBeResent(t *testing.T) {
	const answer = `{"batchItemFailures":[]}`
	var got *http.Request
	g := &exitGate{abandoned: func() int { return 0 }, logger: slog.New(slog.DiscardHandler),
		base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			got = r
			return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody}, nil
		})}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9001/2018-06-01/runtime/invocation/id-1/response", io.NopCloser(strings.NewReader(answer)))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // as httputil.ReverseProxy sends it
	if _, err := g.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.GetBody == nil {
		t.Fatalf("forwarded request without GetBody; want one net/http can resend")
	}
	for i := range 2 {
		body, err := got.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(body); string(b) != answer {
			t.Errorf("GetBody %d gave %q; want %q", i, b, answer)
		}
	}
	if b, _ := io.ReadAll(got.Body); string(b) != answer {
		t.Errorf("body %q; want %q", b, answer)
	}
}

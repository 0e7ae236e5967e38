package apigw_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
)

// TestOnReplayIsCalledOnReplaysOnly: OnReplay sees every replayed
// response, a stored success and a stored failure, with the request; never
// a first run, an unstored response, a transient failure or a refusal. The
// header it adds reaches the caller.
func TestOnReplayIsCalledOnReplaysOnly(t *testing.T) {
	var mu sync.Mutex
	var seen []string // the replayed requests' keys and statuses
	var transientLeft atomic.Int64
	transientLeft.Store(1)
	o := apigw.Options{OnReplay: func(ctx context.Context, req events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, req.Headers["idempotency-key"]+" "+resp.Headers[apigw.HeaderReplayed])
		resp.Headers["X-Replay-Seen"] = "yes"
	}}
	f := newFixture(t, oncely.Options{Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}}, o, func(_ context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		switch {
		case strings.Contains(req.Body, "fail"):
			return events.APIGatewayV2HTTPResponse{}, oncely.Permanent(errors.New("no"))
		case strings.Contains(req.Body, "busy"):
			return events.APIGatewayV2HTTPResponse{StatusCode: 503}, nil
		case strings.Contains(req.Body, "flaky") && transientLeft.Add(-1) >= 0:
			return events.APIGatewayV2HTTPResponse{}, oncely.Transient(errors.New("later"))
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"ok":true}`}, nil
	})
	calls := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	steps := []struct {
		name     string
		req      events.APIGatewayV2HTTPRequest
		status   int
		onReplay bool
	}{
		{"a first run", request(header("idempotency-key", "success-0001")), 201, false},
		{"its replay", request(header("idempotency-key", "success-0001")), 201, true},
		{"the key with another body", request(header("idempotency-key", "success-0001"), body(`{"other":1}`)), 422, false},
		{"a refusal", request(header("idempotency-key", "short")), 400, false},
		{"a stored failure, first", request(header("idempotency-key", "failure-0001"), body(`"fail"`)), 422, false},
		{"a stored failure, replayed", request(header("idempotency-key", "failure-0001"), body(`"fail"`)), 422, true},
		{"an unstored response", request(header("idempotency-key", "busy-0001"), body(`"busy"`)), 503, false},
		{"an unstored response again", request(header("idempotency-key", "busy-0001"), body(`"busy"`)), 503, false},
		{"a transient failure", request(header("idempotency-key", "flaky-0001"), body(`"flaky"`)), 503, false},
		{"the retry that succeeds", request(header("idempotency-key", "flaky-0001"), body(`"flaky"`)), 201, false},
		{"its replay", request(header("idempotency-key", "flaky-0001"), body(`"flaky"`)), 201, true},
	}
	want := 0
	for _, s := range steps {
		resp, _ := f.handle(t, s.req)
		if s.onReplay {
			want++
		}
		if resp.StatusCode != s.status {
			t.Errorf("%s: status %d %s; want %d", s.name, resp.StatusCode, resp.Body, s.status)
		}
		if got := calls(); got != want {
			t.Fatalf("%s: OnReplay called %d times so far; want %d", s.name, got, want)
		}
		if got := resp.Headers["X-Replay-Seen"]; (got == "yes") != s.onReplay {
			t.Errorf("%s: X-Replay-Seen %q; want it set %v", s.name, got, s.onReplay)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if wantSeen := []string{"success-0001 true", "failure-0001 true", "flaky-0001 true"}; strings.Join(seen, ",") != strings.Join(wantSeen, ",") {
		t.Errorf("OnReplay saw %q; want %q (the request's key, the response marked replayed)", seen, wantSeen)
	}
}

// TestOnReplayDoesNotChangeWhatIsStored: a header OnReplay adds to one
// replay is not in the next.
func TestOnReplayDoesNotChangeWhatIsStored(t *testing.T) {
	var n atomic.Int64
	o := apigw.Options{OnReplay: func(_ context.Context, _ events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse) {
		if n.Add(1) == 1 {
			resp.Headers["X-Only-Once"] = "1"
			resp.Body = "changed"
		}
	}}
	f := newFixture(t, oncely.Options{}, o, created)
	f.handle(t, request())
	f.handle(t, request())
	third, _ := f.handle(t, request())
	if _, ok := third.Headers["X-Only-Once"]; ok || third.Body != `{"ok":true}` {
		t.Errorf("third: %s %v; want the stored response, without the first replay's changes", third.Body, third.Headers)
	}
}

package apigw_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/driver"
)

// checkRetryAfter checks that resp asks for a retry after whole seconds,
// at least one.
func checkRetryAfter(t *testing.T, resp events.APIGatewayV2HTTPResponse) int {
	t.Helper()
	secs, err := strconv.Atoi(resp.Headers["Retry-After"])
	if err != nil || secs < 1 {
		t.Errorf("Retry-After %q; want whole seconds, at least 1", resp.Headers["Retry-After"])
	}
	return secs
}

// TestInFlightRequestGets409WithRetryAfter: while the first request's
// handler runs, a request with the same key is refused 409 IN_PROGRESS with
// Retry-After, and does not run the handler; once the first ends, a retry
// gets its response replayed.
func TestInFlightRequestGets409WithRetryAfter(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	f := newFixture(t, oncely.Options{}, apigw.Options{}, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		close(entered) // a second run would panic here
		<-release
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"first":true}`}, nil
	})
	type answer struct {
		resp events.APIGatewayV2HTTPResponse
		res  apigw.Result
	}
	first := make(chan answer, 1)
	go func() {
		resp, res := f.h.Handle(context.Background(), request())
		first <- answer{resp, res}
	}()
	<-entered

	resp, res := f.handle(t, request())
	checkProblem(t, resp, 409, "IN_PROGRESS")
	checkRetryAfter(t, resp)
	if res.Label != driver.LabelInProgress || res.Replayed || resp.Headers[apigw.HeaderReplayed] != "" {
		t.Errorf("result %+v, headers %v; want label in_progress, not replayed", res, resp.Headers)
	}

	open()
	a := <-first
	if a.resp.StatusCode != 201 || a.resp.Body != `{"first":true}` || a.res.Label != driver.LabelExecuted {
		t.Errorf("the first request got %d %s (label %s); want its 201", a.resp.StatusCode, a.resp.Body, a.res.Label)
	}
	again, _ := f.handle(t, request())
	if again.StatusCode != 201 || again.Body != `{"first":true}` || again.Headers[apigw.HeaderReplayed] != "true" {
		t.Errorf("the retry got %d %s %v; want the first's 201, replayed", again.StatusCode, again.Body, again.Headers)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("handler runs %d; want 1", n)
	}
}

// TestSameKeyWithAnotherBodyGets422: a key reused with another body is
// refused KEY_REUSED, and the first body still gets its own response.
func TestSameKeyWithAnotherBodyGets422(t *testing.T) {
	f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
	if resp, _ := f.handle(t, request()); resp.StatusCode != 201 {
		t.Fatalf("first: %d %s", resp.StatusCode, resp.Body)
	}
	resp, res := f.handle(t, request(body(`{"id":"release-43","action":"notify"}`)))
	checkProblem(t, resp, 422, "KEY_REUSED")
	if res.Code != oncely.CodeKeyReused || res.Replayed || resp.Headers[apigw.HeaderReplayed] != "" {
		t.Errorf("result %+v, headers %v; want KEY_REUSED, not replayed", res, resp.Headers)
	}
	// The same document with its members in another order is the same body.
	same, _ := f.handle(t, request(body(`{"action":"notify","id":"release-42"}`)))
	if same.StatusCode != 201 || same.Headers[apigw.HeaderReplayed] != "true" {
		t.Errorf("the first body reordered: %d %v; want the stored 201, replayed", same.StatusCode, same.Headers)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("handler runs %d; want 1", n)
	}
}

// TestStoredPermanentFailureIsReplayedAs422: a permanent failure (marked,
// unmarked, or a panic) is answered 422 with its code and a fixed sentence,
// never the error's text; every retry gets the same document, marked
// replayed, without running the handler. The error's text is the Result's,
// for the log.
func TestStoredPermanentFailureIsReplayedAs422(t *testing.T) {
	tests := []struct {
		name string
		fail func() error
		code string
	}{
		{"an unmarked error", func() error { return errors.New("notify: POST to " + leakyURL + ": tls: handshake failure") }, "PERMANENT_FAILURE"},
		{"oncely.Permanent", func() error { return oncely.Permanent(errors.New("POST " + leakyURL + ": 400")) }, "PERMANENT_FAILURE"},
		{"oncely.PermanentCode", func() error { return oncely.PermanentCode("HTTP_404", errors.New("POST "+leakyURL+": 404")) }, "HTTP_404"},
		{"a panic", func() error { panic("the secret at " + leakyURL) }, "PANIC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				return events.APIGatewayV2HTTPResponse{}, tt.fail()
			})
			first, res := f.handle(t, request())
			checkProblem(t, first, 422, tt.code)
			checkNoLeak(t, first)
			if first.Headers[apigw.HeaderReplayed] != "" || res.Replayed {
				t.Errorf("the first answer is marked replayed: %v", first.Headers)
			}
			if string(res.Code) != tt.code || res.Label != driver.LabelPermanent {
				t.Errorf("result %+v; want code %s, label permanent", res, tt.code)
			}
			for i := range 2 {
				replay, res := f.handle(t, request())
				checkNoLeak(t, replay)
				if replay.StatusCode != 422 || replay.Body != first.Body || replay.Headers[apigw.HeaderReplayed] != "true" || !res.Replayed {
					t.Errorf("replay %d: %d %s %v; want the first answer byte for byte, marked replayed", i+1, replay.StatusCode, replay.Body, replay.Headers)
				}
			}
			if n := f.calls.Load(); n != 1 {
				t.Errorf("handler runs %d; want 1", n)
			}
		})
	}
}

// TestTransientFailureGets503AndReleasesTheKey: a transient error is
// answered 503 with Retry-After and a fixed sentence; nothing is stored,
// so the retry with the same key runs the handler, and its success is
// then replayed.
func TestTransientFailureGets503AndReleasesTheKey(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		retryAfter string
	}{
		{"oncely.Transient", oncely.Transient(errors.New("dial " + leakyURL + ": 503")), "1"},
		{"oncely.TransientAfter the downstream's Retry-After", oncely.TransientAfter(errors.New("POST "+leakyURL+": 429"), 120*time.Second), "120"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failing atomic.Bool
			failing.Store(true)
			f := newFixture(t, oncely.Options{Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}}, apigw.Options{}, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				if failing.Load() {
					return events.APIGatewayV2HTTPResponse{}, tt.err
				}
				return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"second":true}`}, nil
			})
			resp, res := f.handle(t, request())
			p := checkProblem(t, resp, 503, "TRANSIENT_FAILURE")
			checkNoLeak(t, resp)
			if got := resp.Headers["Retry-After"]; got != tt.retryAfter {
				t.Errorf("Retry-After %q; want %s", got, tt.retryAfter)
			}
			if p.Detail != "the action failed for now and nothing was kept; retry later with the same key" {
				t.Errorf("detail %q; want the fixed sentence", p.Detail)
			}
			if res.Label != driver.LabelTransient || res.Replayed {
				t.Errorf("result %+v; want label transient", res)
			}

			failing.Store(false)
			retry, res := f.handle(t, request())
			if retry.StatusCode != 201 || retry.Body != `{"second":true}` || res.Replayed || retry.Headers[apigw.HeaderReplayed] != "" {
				t.Errorf("the retry got %d %s %v; want the handler's own 201", retry.StatusCode, retry.Body, retry.Headers)
			}
			if n := f.calls.Load(); n != 2 {
				t.Errorf("handler runs %d; want 2", n)
			}
			if again, _ := f.handle(t, request()); again.Body != `{"second":true}` || again.Headers[apigw.HeaderReplayed] != "true" {
				t.Errorf("after the success: %d %s %v; want it replayed", again.StatusCode, again.Body, again.Headers)
			}
		})
	}
}

// TestCorruptStoredRecordGets500: a stored success that is not a response
// envelope is answered 500 CORRUPT_RECORD, without running the handler.
func TestCorruptStoredRecordGets500(t *testing.T) {
	for name, stored := range map[string]string{
		"not JSON":              `{"status":201,`,
		"a JSON array":          `[201]`,
		"base64 that is not":    `{"status":200,"body_base64":"!!not base64!!"}`,
		"an Error-bearing text": "dial " + leakyURL,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, created)
			storeSucceeded(t, f.store.Store, scopedKey(t, request(), clientKey), reqBody, []byte(stored))
			resp, res := f.handle(t, request())
			checkProblem(t, resp, 500, "CORRUPT_RECORD")
			checkNoLeak(t, resp)
			if res.Code != "CORRUPT_RECORD" || res.Label != driver.LabelStoreError {
				t.Errorf("result %+v; want CORRUPT_RECORD, label store_error", res)
			}
			if n := f.calls.Load(); n != 0 {
				t.Errorf("handler runs %d; want 0", n)
			}
		})
	}
}

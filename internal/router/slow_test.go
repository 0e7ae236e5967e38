package router_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/samtemplate"
)

// shipped returns a function's settings as template.yaml ships them: its
// configuration (config.Load over its literal environment, with stand-ins
// for what only a deployment knows) and its timeout.
func shipped(t *testing.T, api bool) (config.Config, time.Duration) {
	t.Helper()
	tpl, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	id := tpl.API
	if !api {
		if len(tpl.Sources) == 0 {
			t.Fatal("the template has no SQS event source")
		}
		id = tpl.Sources[0].Function
	}
	fn, ok := tpl.Functions[id]
	if !ok {
		t.Fatalf("no function %q in the template", id)
	}
	env := map[string]string{config.EnvFunctionName: id}
	for k, v := range fn.Env {
		env[k] = v
	}
	for _, k := range []string{config.EnvTable, config.EnvLedgerTable, config.EnvDownstreamURLSecret, config.EnvWebhookSecret} {
		if slices.Contains(fn.Computed, k) {
			env[k] = "deployed-" + k
		}
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s's environment: %v", id, err)
	}
	return cfg, fn.Timeout
}

// slowAnswer is how long the slow receiver below takes to answer: longer
// than the 2 s NOTIFY_TIMEOUT the API function once shipped, and 1.5 s
// inside the 4 s it ships now. The promise itself, a receiver answering in
// 3 s plus 1 s for a distant receiver's dial and network, is
// internal/deploy's arithmetic on the template; here the network is the
// loopback, and the room is for a loaded machine under -race (a 3 s
// receiver left it 1 s for the reservation, the dial, both ends'
// scheduling and the reply).
const slowAnswer = 2500 * time.Millisecond

// A slow receiver that answers within NOTIFY_TIMEOUT, through the API
// function with its shipped settings (NOTIFY_TIMEOUT, attempts, backoff,
// its timeout as the invocation's deadline), is called once and the caller
// gets its reply. Before: 2 attempts of 2 s, two POSTs (the second cut at
// the deadline) and a 503.
func TestAPISlowReceiverWithinNotifyTimeoutIsCalledOnceAndAnswers(t *testing.T) {
	cfg, timeout := shipped(t, true)
	h := newHarness(t, func(o *harnessOptions) { o.retry, o.notifyTimeout = cfg.Retry, cfg.NotifyTimeout })
	slow := fakewebhook.Reply{Delay: slowAnswer}
	h.down.Script(downKey, slow, slow, slow)
	req := apiRequest(t, clientKey, apiBody)
	// The invocation's clock starts when the request is built, as Lambda's
	// does when it hands the event over.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp := h.api(ctx, req)
	if resp.StatusCode != 200 {
		t.Errorf("got %d %v %s; want 200 with the receiver's reply (NOTIFY_TIMEOUT %v, Timeout %v)", resp.StatusCode, resp.Headers, resp.Body, cfg.NotifyTimeout, timeout)
	}
	if n := h.down.Count(downKey); n != 1 {
		t.Errorf("POSTs %d; want 1", n)
	}
}

// A receiver slower than NOTIFY_TIMEOUT gets one POST per API request:
// the caller gets 503 with Retry-After, the key is released, and the
// caller's retry makes the next POST. (Scaled: a receiver that never
// answers, a short NOTIFY_TIMEOUT, the API function's attempts.)
func TestAPISlowReceiverGetsOnePOSTPerRequest(t *testing.T) {
	cfg, _ := shipped(t, true)
	if cfg.Retry.AttemptsPerDelivery < 2 {
		t.Fatalf("the API function makes %d attempts per request; this test wants the in-call retries it would refuse", cfg.Retry.AttemptsPerDelivery)
	}
	h := newHarness(t, func(o *harnessOptions) { o.retry, o.notifyTimeout = cfg.Retry, 500*time.Millisecond })
	if err := h.down.SetRules([]fakewebhook.Rule{{Match: downKey, Reply: fakewebhook.Reply{Hang: true}}}); err != nil {
		t.Fatal(err)
	}
	for request := 1; request <= 2; request++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp := h.api(ctx, apiRequest(t, clientKey, apiBody))
		cancel()
		if resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" || problemCode(t, resp) != "TRANSIENT_FAILURE" {
			t.Errorf("request %d: got %d %v %s; want 503 TRANSIENT_FAILURE with Retry-After", request, resp.StatusCode, resp.Headers, resp.Body)
		}
		if n := h.down.Count(downKey); n != request {
			t.Errorf("after request %d: POSTs %d; want %d, one per request", request, n, request)
		}
		rec := h.item(namespace + "#" + downKey)
		if attrS(rec, "status") != "FAILED" || !rec["retryable"].(*typesBool).Value || attrN(rec, "attempts") != strconv.Itoa(request) {
			t.Errorf("after request %d: record %s retryable %v, %s attempts; want released (FAILED, retryable), %d attempts", request, attrS(rec, "status"), rec["retryable"], attrN(rec, "attempts"), request)
		}
	}
}

// A receiver slower than NOTIFY_TIMEOUT gets one POST per queue receive,
// not one per in-call attempt: the message goes back with its backoff
// each time. (Scaled as above, with the queue function's attempts.)
func TestSQSSlowReceiverGetsOnePOSTPerReceive(t *testing.T) {
	cfg, _ := shipped(t, false)
	if cfg.Retry.AttemptsPerDelivery < 2 {
		t.Fatalf("the queue function makes %d attempts per delivery; this test wants the in-call retries it would refuse", cfg.Retry.AttemptsPerDelivery)
	}
	h := newHarness(t, func(o *harnessOptions) { o.retry, o.notifyTimeout = cfg.Retry, 500*time.Millisecond })
	if err := h.down.SetRules([]fakewebhook.Rule{{Match: keyA, Reply: fakewebhook.Reply{Hang: true}}}); err != nil {
		t.Fatal(err)
	}
	for receive := 1; receive <= 3; receive++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp := h.sqs(ctx, false, msg{id: "m1", body: bodyA})
		cancel()
		if f := failed(resp); len(f) != 1 || f[0] != "m1" {
			t.Fatalf("receive %d: failures %v; want m1 back in the queue", receive, f)
		}
		if n := h.down.Count(keyA); n != receive {
			t.Errorf("after receive %d: POSTs %d; want %d, one per receive", receive, n, receive)
		}
		rec := h.item(namespace + "#" + keyA)
		if attrS(rec, "status") != "FAILED" || !rec["retryable"].(*typesBool).Value || attrN(rec, "attempts") != strconv.Itoa(receive) || attrS(rec, "error_code") != "TRANSIENT_FAILURE" {
			t.Errorf("after receive %d: record %s retryable %v %s, %s attempts; want released: FAILED, retryable, TRANSIENT_FAILURE, %d attempts", receive, attrS(rec, "status"), rec["retryable"], attrS(rec, "error_code"), attrN(rec, "attempts"), receive)
		}
	}
	if !contains(h.logs.String(), "the request was sent") {
		t.Errorf("logs %s; want the attempt's line to say the request was sent", h.logs.String())
	}
}

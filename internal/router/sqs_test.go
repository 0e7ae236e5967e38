package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"
	"github.com/truora/minidyn/server"

	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

const (
	keyA = "evt:release-42:notify"
	keyB = "evt:release-43:notify"
)

var (
	bodyA = event("release-42", "notify", `"version":"1.4.2"`)
	bodyB = event("release-43", "notify")
)

func TestDuplicateAcrossBatchesCallsDownstreamOnce(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if f := failed(h.sqs(ctx, false, msg{id: "m1", body: bodyA})); len(f) != 0 {
		t.Fatalf("first batch failures %v; want none", f)
	}
	// The same event redelivered under a new message id, keys reordered.
	if f := failed(h.sqs(ctx, false, msg{id: "m2", body: `{"version":"1.4.2","action":"notify","id":"release-42"}`})); len(f) != 0 {
		t.Fatalf("second batch failures %v; want none", f)
	}
	if n := h.down.Count(keyA); n != 1 {
		t.Errorf("downstream deliveries for %s: %d; want 1", keyA, n)
	}
	if !contains(h.logs.String(), `"outcome":"replayed"`) {
		t.Errorf("second delivery not logged as replayed: %s", h.logs.String())
	}
}

func TestDuplicateWithinBatchRunsOnceAndBothAcknowledged(t *testing.T) {
	h := newHarness(t)
	resp := h.sqs(context.Background(), false, msg{id: "m1", body: bodyA}, msg{id: "m2", body: bodyA}, msg{id: "m3", body: bodyB})
	if f := failed(resp); len(f) != 0 {
		t.Fatalf("failures %v; want none: the in-batch copy shares the outcome, it is not sent back", f)
	}
	if a, b := h.down.Count(keyA), h.down.Count(keyB); a != 1 || b != 1 {
		t.Errorf("downstream deliveries A=%d B=%d; want 1 each", a, b)
	}
	// Two keys, two calls each: the copy costs no store call at all.
	if got := h.counter.Counts(); got["PutItem"] != 2 || got["UpdateItem"] != 2 || got["GetItem"] != 0 {
		t.Errorf("store calls %v; want 2 PutItem and 2 UpdateItem", got)
	}
}

func TestTransient503Then200AcrossTwoDeliveries(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// Retry-After beyond the in-call cap: the key is released, SQS redelivers.
	h.down.Script(keyA, fakewebhook.Reply{Status: 503, RetryAfter: "30"})
	if f := failed(h.sqs(ctx, false, msg{id: "m1", body: bodyA})); !cmp.Equal(f, []string{"m1"}) {
		t.Fatalf("first delivery failures %v; want [m1]", f)
	}
	rec := h.item(namespace + "#" + keyA)
	if attrS(rec, "status") != "FAILED" || !rec["retryable"].(*typesBool).Value {
		t.Fatalf("after 503: record %v; want FAILED, retryable (released)", rec)
	}
	if f := failed(h.sqs(ctx, false, msg{id: "m1", body: bodyA})); len(f) != 0 {
		t.Fatalf("redelivery failures %v; want none", f)
	}
	if n := h.down.Count(keyA); n != 2 {
		t.Errorf("downstream deliveries %d; want 2 (503, then 202)", n)
	}
	if rec := h.item(namespace + "#" + keyA); attrS(rec, "status") != "SUCCEEDED" || attrN(rec, "attempts") != "2" {
		t.Errorf("final record status %s attempts %s; want SUCCEEDED 2", attrS(rec, "status"), attrN(rec, "attempts"))
	}
}

func TestTransient503RetriedInCall(t *testing.T) {
	h := newHarness(t)
	h.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 429})
	if f := failed(h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})); len(f) != 0 {
		t.Fatalf("failures %v; want none", f)
	}
	if n := h.down.Count(keyA); n != 3 {
		t.Errorf("deliveries %d; want 3", n)
	}
	if got := h.recorded(); !cmp.Equal(got, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}) {
		t.Errorf("backoff %v; want [10ms 20ms]", got)
	}
}

// A 502 or 504 comes from a gateway that may have forwarded the request:
// like a timeout once written, it ends the delivery's attempts (one POST,
// nothing slept), and the message goes back for a later delivery.
func TestGateway502EndsTheDelivery(t *testing.T) {
	for _, status := range []int{502, 504} {
		h := newHarness(t)
		h.down.Script(keyA, fakewebhook.Reply{Status: status})
		if f := failed(h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})); !cmp.Equal(f, []string{"m1"}) {
			t.Fatalf("%d: failures %v; want [m1]: back to the queue", status, f)
		}
		if n := h.down.Count(keyA); n != 1 {
			t.Errorf("%d: deliveries %d; want 1", status, n)
		}
		if got := h.recorded(); len(got) != 0 {
			t.Errorf("%d: slept %v; want no in-call retry", status, got)
		}
	}
}

func TestPermanent404AcknowledgedAndReplayed(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.down.Script(keyA, fakewebhook.Reply{Status: 404})
	if f := failed(h.sqs(ctx, false, msg{id: "m1", body: bodyA})); len(f) != 0 {
		t.Fatalf("failures %v; want none: a permanent failure is recorded and acknowledged", f)
	}
	rec := h.item(namespace + "#" + keyA)
	if attrS(rec, "status") != "FAILED" || attrS(rec, "error_code") != "HTTP_404" || rec["retryable"].(*typesBool).Value {
		t.Fatalf("record %v; want FAILED HTTP_404, not retryable", rec)
	}
	if f := failed(h.sqs(ctx, false, msg{id: "m9", body: bodyA})); len(f) != 0 {
		t.Fatalf("redelivery failures %v; want none", f)
	}
	if n := h.down.Count(keyA); n != 1 {
		t.Errorf("downstream deliveries %d; want 1: the redelivery replays the failure", n)
	}
}

func Test429RetryAfterHonouredInCall(t *testing.T) {
	h := newHarness(t)
	h.down.Script(keyA, fakewebhook.Reply{Status: 429, RetryAfter: "1"})
	if f := failed(h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})); len(f) != 0 {
		t.Fatalf("failures %v; want none", f)
	}
	if got := h.recorded(); !cmp.Equal(got, []time.Duration{time.Second}) {
		t.Errorf("slept %v; want the downstream's Retry-After [1s]", got)
	}
	if n := h.down.Count(keyA); n != 2 {
		t.Errorf("deliveries %d; want 2", n)
	}
}

func Test429RetryAfterBeyondCapGoesBackToQueue(t *testing.T) {
	h := newHarness(t)
	h.down.Script(keyA, fakewebhook.Reply{Status: 429, RetryAfter: "120"})
	if f := failed(h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})); !cmp.Equal(f, []string{"m1"}) {
		t.Fatalf("failures %v; want [m1]", f)
	}
	if got := h.recorded(); len(got) != 0 {
		t.Errorf("slept %v; want no in-call sleep past the cap", got)
	}
}

func TestFIFOGroupStopsAtFirstFailure(t *testing.T) {
	h := newHarness(t)
	h.down.Script("evt:a1:notify", fakewebhook.Reply{Status: 503, RetryAfter: "60"})
	resp := h.sqs(context.Background(), true,
		msg{id: "a1", body: event("a1", "notify"), group: "g1"},
		msg{id: "b1", body: event("b1", "notify"), group: "g2"},
		msg{id: "a2", body: event("a2", "notify"), group: "g1"},
		msg{id: "b2", body: event("b2", "notify"), group: "g2"},
		msg{id: "a3", body: event("a3", "notify"), group: "g1"},
	)
	if f := failed(resp); !cmp.Equal(f, []string{"a1", "a2", "a3"}) {
		t.Fatalf("failures %v; want [a1 a2 a3]: the failed record and the rest of its group", f)
	}
	for key, want := range map[string]int{"evt:a1:notify": 1, "evt:a2:notify": 0, "evt:a3:notify": 0, "evt:b1:notify": 1, "evt:b2:notify": 1} {
		if n := h.down.Count(key); n != want {
			t.Errorf("deliveries %s = %d; want %d", key, n, want)
		}
	}
}

func TestFIFOGroupRunsInOrder(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := range 8 {
		id := string(rune('a'+i)) + "-ordered"
		ids = append(ids, id)
		h.down.Script("evt:"+id+":notify", fakewebhook.Reply{Delay: time.Duration(8-i) * time.Millisecond})
	}
	var msgs []msg
	for _, id := range ids {
		msgs = append(msgs, msg{id: id, body: event(id, "notify"), group: "g"})
	}
	if f := failed(h.sqs(context.Background(), true, msgs...)); len(f) != 0 {
		t.Fatalf("failures %v", f)
	}
	var order []string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"record"`) {
			var l struct{ MessageID string }
			_ = json.Unmarshal([]byte(line), &l)
			order = append(order, l.MessageID)
		}
	}
	if !cmp.Equal(order, ids) {
		t.Errorf("records logged in order %v; want %v", order, ids)
	}
	// The store's timestamps prove the order of execution.
	var last int64
	for _, id := range ids {
		var created int64
		_ = json.Unmarshal([]byte(attrN(h.item(namespace+"#evt:"+id+":notify"), "created_at")), &created)
		if created < last {
			t.Errorf("%s reserved at %d, before its predecessor at %d", id, created, last)
		}
		last = created
	}
}

func TestPanicInActionIsRecordedAndBatchGoesOn(t *testing.T) {
	h := newHarness(t)
	resp := h.sqs(context.Background(), false,
		msg{id: "m1", body: event("boom-1", "notify", `"panic":true`)},
		msg{id: "m2", body: bodyB})
	if f := failed(resp); len(f) != 0 {
		t.Fatalf("failures %v; want none: the panic is a recorded permanent failure", f)
	}
	if rec := h.item(namespace + "#evt:boom-1:notify"); attrS(rec, "error_code") != "PANIC" {
		t.Errorf("record %v; want FAILED PANIC", rec)
	}
	if h.down.Count(keyB) != 1 {
		t.Errorf("the other record did not run")
	}
	if !contains(h.logs.String(), "the action hit a bug") || !contains(h.logs.String(), "goroutine") {
		t.Errorf("panic and stack not logged")
	}
}

func TestStoreOutageFailsEveryUnfinishedRecord(t *testing.T) {
	h := newHarness(t)
	h.ddb.EmulateFailure(server.FailureConditionInternalServerError)
	resp := h.sqs(context.Background(), false,
		msg{id: "m1", body: bodyA}, msg{id: "m2", body: bodyB}, msg{id: "m3", body: "not json"})
	if f := failed(resp); !cmp.Equal(f, []string{"m1", "m2", "m3"}) {
		t.Fatalf("failures %v; want all three: nothing is acknowledged without a record", f)
	}
	if n := h.down.Total(); n != 0 {
		t.Errorf("downstream deliveries %d; want 0: no work without a reservation", n)
	}
}

func TestNearDeadlineRecordsAreNotStarted(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // below MinRemaining
	defer cancel()
	resp := h.sqs(ctx, false, msg{id: "m1", body: bodyA}, msg{id: "m2", body: bodyB})
	if f := failed(resp); !cmp.Equal(f, []string{"m1", "m2"}) {
		t.Fatalf("failures %v; want both", f)
	}
	if n := h.down.Total() + h.counter.Total(); n != 0 {
		t.Errorf("%d downstream or store calls; want none", n)
	}
}

func TestPoisonMessagesAreRecordedAndAcknowledged(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// Establish the key, so that a different payload under it is a reuse.
	h.sqs(ctx, false, msg{id: "m0", body: bodyA})
	cases := []struct {
		id, body, reason string
	}{
		{"p-notjson", `{"id":"release-42"`, "NOT_JSON"},
		{"p-nokey", `{"action":"notify"}`, "KEY_MISSING"},
		{"p-emptyid", `{"id":"","action":"notify"}`, "KEY_MISSING"},
		{"p-numid", `{"id":12345678901234567891,"action":"notify"}`, "KEY_MISSING"},
		{"p-badkey", `{"id":"a b/c","action":"notify"}`, "INVALID_KEY"},
		{"p-reused", event("release-42", "notify", `"version":"9.9.9"`), "KEY_REUSED"},
	}
	var msgs []msg
	for _, c := range cases {
		msgs = append(msgs, msg{id: c.id, body: c.body})
	}
	if f := failed(h.sqs(ctx, false, msgs...)); len(f) != 0 {
		t.Fatalf("failures %v; want none: each is recorded, then acknowledged", f)
	}
	for _, c := range cases {
		item := h.item(namespace + "#poison#" + c.id)
		if attrS(item, "reason") != c.reason || len(attrS(item, "body_sha256")) != 64 || attrS(item, "status") != "POISON" {
			t.Errorf("%s: poison note %v; want reason %s and a body digest", c.id, item, c.reason)
		}
		for name, v := range item {
			if s, ok := v.(*typesS); ok && strings.Contains(s.Value, "notify") && name != "detail" && name != "event_key" {
				t.Errorf("%s: attribute %s holds the body: %q", c.id, name, s.Value)
			}
		}
		// The key, never the payload: only the reused key's note names it
		// (the others gave no valid key).
		if want := map[string]string{"p-reused": keyA}[c.id]; attrS(item, "event_key") != want {
			t.Errorf("%s: event_key %q, want %q", c.id, attrS(item, "event_key"), want)
		}
	}
	if n := h.down.Count(keyA); n != 1 {
		t.Errorf("deliveries for the reused key %d; want 1", n)
	}
	if rec := h.item(namespace + "#" + keyA); !strings.Contains(attrS(rec, "result"), "delivered") {
		t.Errorf("the original record was changed by the reuse: %v", rec)
	}
}

func TestUnkeyableMessageIDFailsWholeBatch(t *testing.T) {
	h := newHarness(t)
	if _, err := h.router.Invoke(context.Background(), loadSQS(t, false, msg{id: "", body: bodyA})); err == nil {
		t.Fatal("a record without messageId was answered record by record; want an invocation error")
	}
}

func TestOneEMFDocumentPerInvocation(t *testing.T) {
	h := newHarness(t)
	h.down.Script(keyB, fakewebhook.Reply{Status: 404})
	h.sqs(context.Background(), false, msg{id: "m1", body: bodyA}, msg{id: "m2", body: bodyA}, msg{id: "m3", body: bodyB}, msg{id: "m4", body: "x"})
	lines := strings.Split(strings.TrimSpace(h.metrics.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d metric documents; want 1:\n%s", len(lines), h.metrics.String())
	}
	var doc struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		FunctionName, Source string
	}
	if err := json.Unmarshal([]byte(lines[0]), &doc); err != nil {
		t.Fatal(err)
	}
	var counts map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &counts)
	want := map[string]float64{"executed": 1, "replayed": 1, "permanent": 1, "poison": 1, "in_progress": 0, "transient": 0, "lease_lost": 0}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("metric %s = %v; want %v", k, counts[k], v)
		}
	}
	if _, ok := counts["duration"].(float64); !ok {
		t.Errorf("no duration metric")
	}
	cw := doc.AWS.CloudWatchMetrics
	if doc.AWS.Timestamp < time.Now().Add(-time.Minute).UnixMilli() || len(cw) != 1 || cw[0].Namespace != "oncely" ||
		!cmp.Equal(cw[0].Dimensions, [][]string{{"FunctionName", "Source"}}) || doc.FunctionName != namespace || doc.Source != "sqs" {
		t.Errorf("EMF metadata %+v, function %q source %q", doc.AWS, doc.FunctionName, doc.Source)
	}
	for _, m := range cw[0].Metrics {
		if _, ok := counts[m.Name]; !ok {
			t.Errorf("declared metric %s has no value at the root", m.Name)
		}
	}
}

// An invocation the function cannot route fails with an error that says
// what it accepts and what it got (not a Go unmarshalling message).
func TestUnsupportedEventSaysWhatItGot(t *testing.T) {
	h := newHarness(t)
	for payload, got := range map[string]string{
		`{"hello":"world"}`:     "an object with members [hello]",
		`[1,2]`:                 "a JSON array of 2 elements",
		`"hello"`:               "a JSON string",
		`42`:                    "a JSON number",
		`null`:                  "null",
		`not json`:              "not JSON",
		`{"Records":"x"}`:       "an object with members [Records]",
		`{"Records":[{"x":1}]}`: "an object with members [Records]",
	} {
		_, err := h.router.Invoke(context.Background(), []byte(payload))
		if err == nil || !strings.Contains(err.Error(), "SQS event") || !strings.Contains(err.Error(), "HTTP API") || !strings.Contains(err.Error(), got) ||
			strings.Contains(err.Error(), "router.shape") {
			t.Errorf("Invoke(%s) = %v; want an error naming what the function accepts and %q", payload, err, got)
		}
	}
}

func TestPayloadExpressionStillRejectsInvalidBodies(t *testing.T) {
	h := newHarness(t, func(o *harnessOptions) { o.payloadExpr = "detail" })
	ctx := context.Background()
	resp := h.sqs(ctx, false,
		msg{id: "ok", body: `{"id":"p-1","action":"notify","detail":{"a":2},"sent_at":"10:00"}`},
		msg{id: "dup", body: `{"id":"p-2","action":"notify","detail":{"a":1,"a":2}}`})
	if f := failed(resp); len(f) != 0 {
		t.Fatalf("failures %v", f)
	}
	if item := h.item(namespace + "#poison#dup"); attrS(item, "reason") != "INVALID_PAYLOAD" {
		t.Errorf("duplicate member names: poison note %v; want INVALID_PAYLOAD", item)
	}
	// Only the selected part is fingerprinted: a new envelope is the same event.
	if f := failed(h.sqs(ctx, false, msg{id: "ok2", body: `{"id":"p-1","action":"notify","detail":{"a":2},"sent_at":"10:05"}`})); len(f) != 0 {
		t.Fatalf("failures %v", f)
	}
	if n := h.down.Count("evt:p-1:notify"); n != 1 {
		t.Errorf("deliveries %d; want 1: the envelope is outside the fingerprint", n)
	}
}

type secretCounts struct{ c secretsource.Counts }

func (s *secretCounts) TakeCounts() secretsource.Counts {
	c := s.c
	s.c = secretsource.Counts{}
	return c
}

// The signing secret's problems since the last document are counted in the
// next one, once.
func TestEMFCountsTheSigningSecretsProblems(t *testing.T) {
	h := newHarness(t)
	h.router.Secret = &secretCounts{secretsource.Counts{Ignored: 2, RefreshFailed: 1}}
	h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})
	h.sqs(context.Background(), false, msg{id: "m2", body: bodyA})
	lines := strings.Split(strings.TrimSpace(h.metrics.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d documents; want 2", len(lines))
	}
	for i, want := range []float64{2, 0} {
		var counts map[string]any
		_ = json.Unmarshal([]byte(lines[i]), &counts)
		if counts[router.MetricSigningKeyIgnored] != want || counts[router.MetricSecretRefreshFailed] != want/2 {
			t.Errorf("document %d: %s %v, %s %v; want %v and %v", i, router.MetricSigningKeyIgnored, counts[router.MetricSigningKeyIgnored],
				router.MetricSecretRefreshFailed, counts[router.MetricSecretRefreshFailed], want, want/2)
		}
	}
}

// The envelope proof's secret, which both functions read, has its
// problems counted with the signing secret's.
func TestEMFCountsTheProofSecretsProblems(t *testing.T) {
	h := newHarness(t)
	h.router.Secret = &secretCounts{secretsource.Counts{Ignored: 1}}
	h.router.ProofSecret = &secretCounts{secretsource.Counts{Ignored: 1, RefreshFailed: 3}}
	h.sqs(context.Background(), false, msg{id: "m1", body: bodyA})
	var counts map[string]any
	_ = json.Unmarshal([]byte(strings.TrimSpace(h.metrics.String())), &counts)
	if counts[router.MetricSigningKeyIgnored] != 2.0 || counts[router.MetricSecretRefreshFailed] != 3.0 {
		t.Errorf("%s %v, %s %v; want 2 and 3", router.MetricSigningKeyIgnored, counts[router.MetricSigningKeyIgnored],
			router.MetricSecretRefreshFailed, counts[router.MetricSecretRefreshFailed])
	}
}

// A payload with a member of an unexpected type gets the answer it always
// got: an error in the same words where routing needs the member (the
// API request, Records, requestContext), and its batch run where it does
// not.
func TestMembersOfAnotherTypeKeepTheirAnswer(t *testing.T) {
	h := newHarness(t)
	with := func(payload []byte, member, value string) []byte {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(payload, &m); err != nil {
			t.Fatal(err)
		}
		m[member] = json.RawMessage(value)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Run("an SQS batch with a stray member runs", func(t *testing.T) {
		out, err := h.router.Invoke(context.Background(), with(loadSQS(t, false, msg{id: "stray-1", body: bodyA}), "headers", "5"))
		resp, ok := out.(events.SQSEventResponse)
		if err != nil || !ok || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("got %#v, %v; want the batch handled, no failures", out, err)
		}
	})
	for name, tc := range map[string]struct {
		payload []byte
		want    string
	}{
		"an API request": {with(apiRequest(t, "k-stray-1", `{}`), "headers", "5"),
			"API Gateway v2 event: json: cannot unmarshal number into Go struct field APIGatewayV2HTTPRequest.headers of type map[string]string"},
		"requestContext.http": {[]byte(`{"requestContext":{"http":"x"}}`),
			`unsupported event: want an SQS event or an API Gateway HTTP API payload 2.0 request; got an object with members [requestContext] (json: cannot unmarshal string into Go struct field .requestContext.http of type struct { Method string "json:\"method\"" })`},
		"Records": {[]byte(`{"Records":[{"body":5}],"requestContext":{"http":{"method":"POST"}}}`),
			"unsupported event: want an SQS event or an API Gateway HTTP API payload 2.0 request; got an object with members [Records, requestContext] (json: cannot unmarshal number into Go struct field SQSMessage.Records.body of type string)"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := h.router.Invoke(context.Background(), tc.payload)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %#v, %v; want the error %q", out, err, tc.want)
			}
		})
	}
}

package esm_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// A template with the shapes of ours, and short timings.
const tpl = `
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 2
      RedrivePolicy: {deadLetterTargetArn: !GetAtt DLQ.Arn, maxReceiveCount: 3}
  DLQ:
    Type: AWS::SQS::Queue
  FQ:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      VisibilityTimeout: 2
      RedrivePolicy: {deadLetterTargetArn: !GetAtt FDLQ.Arn, maxReceiveCount: 3}
  FDLQ:
    Type: AWS::SQS::Queue
    Properties: {FifoQueue: true}
`

type env struct {
	t      *testing.T
	client *sqs.Client
	pair   sqslocal.Pair
}

func newEnv(t *testing.T, queue string) *env {
	t.Helper()
	client := sqslocal.Client(sqslocal.Endpoint(t))
	parsed, err := samtemplate.Parse([]byte(tpl))
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	pair, err := sqslocal.CreatePair(context.Background(), client, parsed, queue, "esm-"+hex.EncodeToString(b[:]), 1)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, client: client, pair: pair}
}

// send sends bodies (FIFO: in group, with distinct deduplication ids) and
// returns their message ids.
func (e *env) send(group string, bodies ...string) []string {
	e.t.Helper()
	var ids []string
	for _, b := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(e.pair.Source.URL), MessageBody: aws.String(b),
			MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}}
		if e.pair.Source.FIFO {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(b)
		}
		out, err := e.client.SendMessage(context.Background(), in)
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.MessageId))
	}
	return ids
}

func (e *env) depth() sqslocal.Depth {
	e.t.Helper()
	d, err := sqslocal.Count(context.Background(), e.client, e.pair.Source.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// run runs a runner with cfg's defaults for the pair until stop says so
// (checked after each invocation) or a bound of invocations passes.
func (e *env) run(invokers []esm.Invoker, mod func(*esm.Config), stop func(esm.Invocation) bool) (*esm.Runner, []esm.Invocation) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var invs []esm.Invocation
	cfg := esm.Config{QueueURL: e.pair.Source.URL, QueueARN: e.pair.Source.ARN, Region: sqslocal.Region, FIFO: e.pair.Source.FIFO,
		BatchSize: 10, ReportBatchItemFailures: true, PollInterval: 20 * time.Millisecond,
		OnInvocation: func(inv esm.Invocation) {
			mu.Lock()
			defer mu.Unlock()
			invs = append(invs, inv)
			if stop(inv) || len(invs) >= 200 {
				cancel()
			}
		}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := esm.New(e.client, cfg, invokers)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cancel()
		<-done
		e.t.Fatalf("the runner did not reach the end of the test in 60s; its log:\n%s", logText(r))
	}
	mu.Lock()
	defer mu.Unlock()
	return r, slices.Clone(invs)
}

func logText(r *esm.Runner) string {
	var b strings.Builder
	for _, e := range r.Log() {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

func answer(body string) esm.Invoker {
	return esm.InvokerFunc(func(context.Context, []byte) ([]byte, error) { return []byte(body), nil })
}

func TestEventHasLambdasShape(t *testing.T) {
	for _, queue := range []string{"Q", "FQ"} {
		t.Run(queue, func(t *testing.T) {
			e := newEnv(t, queue)
			ids := e.send("g1", `{"id":"a"}`)
			var got events.SQSEvent
			inv := esm.InvokerFunc(func(_ context.Context, p []byte) ([]byte, error) {
				dec := json.NewDecoder(strings.NewReader(string(p)))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&got); err != nil {
					t.Errorf("the event does not decode strictly as events.SQSEvent: %v", err)
				}
				return nil, nil
			})
			e.run([]esm.Invoker{inv}, nil, func(esm.Invocation) bool { return true })
			if len(got.Records) != 1 {
				t.Fatalf("records %d; want 1", len(got.Records))
			}
			r := got.Records[0]
			if r.MessageId != ids[0] || r.ReceiptHandle == "" || r.Body != `{"id":"a"}` || r.Md5OfBody == "" {
				t.Errorf("record %+v; want messageId %s, a receiptHandle, the body and its md5", r, ids[0])
			}
			if r.EventSource != "aws:sqs" || r.EventSourceARN != e.pair.Source.ARN || r.AWSRegion != sqslocal.Region {
				t.Errorf("eventSource %q ARN %q region %q; want aws:sqs, %q, %q", r.EventSource, r.EventSourceARN, r.AWSRegion, e.pair.Source.ARN, sqslocal.Region)
			}
			want := []string{"ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount", "SenderId", "SentTimestamp"}
			if queue == "FQ" {
				want = append(want, "MessageDeduplicationId", "MessageGroupId", "SequenceNumber")
				slices.Sort(want)
			}
			var keys []string
			for k := range r.Attributes {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Errorf("attribute names (-want +got):\n%s", diff)
			}
			if r.Attributes["ApproximateReceiveCount"] != "1" {
				t.Errorf("ApproximateReceiveCount %q; want 1", r.Attributes["ApproximateReceiveCount"])
			}
			if a := r.MessageAttributes["tenant"]; aws.ToString(a.StringValue) != "acme" || a.DataType != "String" {
				t.Errorf("messageAttributes %+v; want tenant = acme (String)", r.MessageAttributes)
			}
		})
	}
}

func TestPartialBatchDeletesExactlyTheAcknowledged(t *testing.T) {
	e := newEnv(t, "Q")
	ids := e.send("", "m0", "m1", "m2", "m3", "m4")
	resp, _ := json.Marshal(events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ids[1]}, {ItemIdentifier: ids[3]}}})
	r, invs := e.run([]esm.Invoker{answer(string(resp))}, func(c *esm.Config) { c.BatchSize = 5 }, func(esm.Invocation) bool { return true })
	if len(invs) != 1 || len(invs[0].Records) != 5 {
		t.Fatalf("invocations %+v; want one of 5 records", invs)
	}
	if d := e.depth(); d.Total() != 2 {
		t.Fatalf("the queue holds %+v; want the 2 messages in batchItemFailures", d)
	}
	var deleted, returned []string
	for _, l := range r.Log() {
		switch l.Op {
		case esm.OpDeleted:
			deleted = append(deleted, l.MessageID)
		case esm.OpReturned:
			returned = append(returned, l.MessageID)
		}
	}
	slices.Sort(deleted)
	want := []string{ids[0], ids[2], ids[4]}
	slices.Sort(want)
	if diff := cmp.Diff(want, deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ids[1], ids[3]}, returned); diff != "" {
		t.Errorf("returned (-want +got):\n%s", diff)
	}
}

func TestWholeBatchFailuresDeleteNothing(t *testing.T) {
	cases := map[string]esm.Invoker{
		"function error": answer(`{"errorMessage":"boom","errorType":"errorString"}`),
		"timeout":        answer(`{"errorMessage":"Task timed out after 3.00 seconds","errorType":"Sandbox.Timedout"}`),
		"no answer":      esm.InvokerFunc(func(context.Context, []byte) ([]byte, error) { return nil, fmt.Errorf("connection refused") }),
		"invalid JSON":   answer(`{"batchItemFailures":[`),
		"unknown id":     answer(`{"batchItemFailures":[{"itemIdentifier":"not-in-the-batch"}]}`),
		"empty id":       answer(`{"batchItemFailures":[{"itemIdentifier":""}]}`),
		"capitalised":    answer(`{"batchItemFailures":[{"ItemIdentifier":"m0"}]}`),
	}
	for name, inv := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, "Q")
			e.send("", "m0", "m1")
			r, invs := e.run([]esm.Invoker{inv}, func(c *esm.Config) { c.BatchSize = 2 }, func(esm.Invocation) bool { return true })
			if len(invs) != 1 || invs[0].Failure == "" {
				t.Fatalf("invocations %+v; want one that failed as a whole", invs)
			}
			for _, l := range r.Log() {
				if l.Op == esm.OpDeleted {
					t.Errorf("deleted %s after %q", l.MessageID, invs[0].Failure)
				}
			}
			// Both come back after the queue's visibility timeout (2 s).
			if d := e.depth(); d.Total() != 2 {
				t.Fatalf("the queue holds %+v; want both messages", d)
			}
		})
	}
}

func TestAcknowledged(t *testing.T) {
	ids := []string{"a", "b"}
	for _, c := range []struct {
		name, body string
		report     bool
		failed     []string
		whole      bool
	}{
		{"empty body", ``, true, nil, false},
		{"null", `null`, true, nil, false},
		{"empty object", `{}`, true, nil, false},
		{"null list", `{"batchItemFailures":null}`, true, nil, false},
		{"empty list", `{"batchItemFailures":[]}`, true, nil, false},
		{"one failure", `{"batchItemFailures":[{"itemIdentifier":"b"}]}`, true, []string{"b"}, false},
		{"invalid JSON", `{`, true, nil, true},
		{"a string", `"ok"`, true, nil, true},
		{"list not a list", `{"batchItemFailures":{"itemIdentifier":"a"}}`, true, nil, true},
		{"entry not an object", `{"batchItemFailures":["a"]}`, true, nil, true},
		{"null id", `{"batchItemFailures":[{"itemIdentifier":null}]}`, true, nil, true},
		{"empty id", `{"batchItemFailures":[{"itemIdentifier":""}]}`, true, nil, true},
		{"unknown id", `{"batchItemFailures":[{"itemIdentifier":"c"}]}`, true, nil, true},
		{"bad key name", `{"batchItemFailures":[{"itemidentifier":"a"}]}`, true, nil, true},
		{"function error", `{"errorType":"Runtime.ExitError","errorMessage":"signal: killed"}`, true, nil, true},
		{"no partial responses: failures ignored", `{"batchItemFailures":[{"itemIdentifier":"b"}]}`, false, nil, false},
		{"no partial responses: function error", `{"errorMessage":"x"}`, false, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			failed, why := esm.Acknowledged([]byte(c.body), ids, c.report)
			if (why != "") != c.whole {
				t.Fatalf("whole-batch failure %q; want one: %t", why, c.whole)
			}
			var got []string
			for id := range failed {
				got = append(got, id)
			}
			slices.Sort(got)
			if diff := cmp.Diff(c.failed, got); diff != "" {
				t.Errorf("failed ids (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConcurrencyStaysWithinMaximum(t *testing.T) {
	e := newEnv(t, "Q")
	var bodies []string
	for i := range 24 {
		bodies = append(bodies, fmt.Sprint("m", i))
	}
	e.send("", bodies...)
	var now, peak atomic.Int32
	busy := make([]atomic.Bool, 4)
	// The first invoke holds until a second one runs beside it (or 5 s
	// pass): a runner that invoked one batch at a time would fail below.
	together, once := make(chan struct{}), sync.Once{}
	var invokers []esm.Invoker
	for i := range 4 {
		invokers = append(invokers, esm.InvokerFunc(func(context.Context, []byte) ([]byte, error) {
			if !busy[i].CompareAndSwap(false, true) {
				t.Errorf("invoker %d got two invokes at once", i)
			}
			defer busy[i].Store(false)
			n := now.Add(1)
			defer now.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if n >= 2 {
				once.Do(func() { close(together) })
			}
			select {
			case <-together:
			case <-time.After(5 * time.Second):
			}
			time.Sleep(50 * time.Millisecond)
			return nil, nil
		}))
	}
	var records atomic.Int32
	_, invs := e.run(invokers, func(c *esm.Config) { c.BatchSize, c.MaximumConcurrency = 2, 3 }, func(inv esm.Invocation) bool {
		return records.Add(int32(len(inv.Records))) >= 24
	})
	if p := peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak concurrent invokes %d; want 2 to MaximumConcurrency 3", p)
	}
	for _, inv := range invs {
		if len(inv.Records) > 2 || inv.Slot > 2 {
			t.Errorf("invocation %d on slot %d with %d records; want at most BatchSize 2 on slots 0-2", inv.ID, inv.Slot, len(inv.Records))
		}
	}
	if d := e.depth(); d.Total() != 0 {
		t.Errorf("the queue holds %+v after every record was acknowledged; want nothing", d)
	}
}

func TestBatchingWindowGathersUntilTheBatchIsFull(t *testing.T) {
	e := newEnv(t, "Q")
	e.send("", "m0", "m1", "m2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan int, 1)
	r, err := esm.New(e.client, esm.Config{QueueURL: e.pair.Source.URL, QueueARN: e.pair.Source.ARN, Region: sqslocal.Region,
		BatchSize: 5, BatchingWindow: time.Minute, ReportBatchItemFailures: true, PollInterval: 20 * time.Millisecond,
		OnInvocation: func(inv esm.Invocation) { got <- len(inv.Records); cancel() }},
		[]esm.Invoker{answer("")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	// The three are gathered (in flight) while the window is open.
	for i := 0; e.depth().InFlight < 3; i++ {
		if i > 500 {
			t.Fatalf("the runner never received the first three: %+v", e.depth())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case n := <-got:
		t.Fatalf("invoked with %d records while the window was open and the batch not full", n)
	default:
	}
	e.send("", "m3", "m4")
	select {
	case n := <-got:
		if n != 5 {
			t.Errorf("invoked with %d records; want the full batch of 5", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not invoked after the batch filled")
	}
	<-done
}

func TestFIFOGroupsInOrderAndNeverTwiceInFlight(t *testing.T) {
	e := newEnv(t, "FQ")
	for _, g := range []string{"A", "B", "C"} {
		var bodies []string
		for i := range 6 {
			bodies = append(bodies, fmt.Sprintf("%s%d", g, i))
		}
		e.send(g, bodies...)
	}
	var mu sync.Mutex
	inFlight := map[string]bool{}
	var seen []string
	failedOnce := false
	var invokers []esm.Invoker
	for range 3 {
		invokers = append(invokers, esm.InvokerFunc(func(_ context.Context, p []byte) ([]byte, error) {
			var ev events.SQSEvent
			_ = json.Unmarshal(p, &ev)
			groups := map[string]bool{}
			mu.Lock()
			for _, r := range ev.Records {
				g := r.Attributes["MessageGroupId"]
				if inFlight[g] && !groups[g] {
					t.Errorf("group %s in two batches at once", g)
				}
				groups[g] = true
				inFlight[g] = true
			}
			mu.Unlock()
			time.Sleep(30 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			for g := range groups {
				inFlight[g] = false
			}
			// Fail B2 once, and (as the function does) the rest of its
			// group in the batch.
			var resp events.SQSEventResponse
			stopped := map[string]bool{}
			for _, r := range ev.Records {
				g := r.Attributes["MessageGroupId"]
				if stopped[g] || (r.Body == "B2" && !failedOnce) {
					failedOnce = true
					stopped[g] = true
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
					continue
				}
				seen = append(seen, r.Body)
			}
			return json.Marshal(resp)
		}))
	}
	var done atomic.Int32
	e.run(invokers, func(c *esm.Config) { c.BatchSize = 4 }, func(inv esm.Invocation) bool {
		for _, r := range inv.Records {
			if r.Deleted {
				done.Add(1)
			}
		}
		return done.Load() >= 18
	})
	mu.Lock()
	defer mu.Unlock()
	for _, g := range []string{"A", "B", "C"} {
		var order []string
		for _, b := range seen {
			if strings.HasPrefix(b, g) {
				order = append(order, b)
			}
		}
		want := []string{g + "0", g + "1", g + "2", g + "3", g + "4", g + "5"}
		if diff := cmp.Diff(want, order); diff != "" {
			t.Errorf("group %s processed out of order (-want +got):\n%s", g, diff)
		}
	}
}

// A runtime that cannot start (a bad configuration) makes the emulator
// answer a bare 502, which rie.Invoke turns into this function error
// (TestInvokeTurnsABare502IntoAFunctionError): the batch must fail as a
// whole, never read as an empty, successful response.
func TestRuntimeThatCannotStartDeletesNothing(t *testing.T) {
	if body, whole := esm.Acknowledged([]byte(`{"errorType":"Runtime.Unavailable","errorMessage":"the emulator answered 502 with no body"}`), []string{"m1"}, true); whole == "" {
		t.Errorf("Acknowledged(%v) deleted messages; want the whole batch failed", body)
	}
}

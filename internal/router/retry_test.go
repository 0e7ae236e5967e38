package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// The named tests of the retry table (issue 9): what a transient failure
// does to an SQS message and to an API request, through the whole handler,
// with the visibility changes made on moto's SQS.

// queueHarness is the handler with a real queue: records come from moto's
// SQS with real receipt handles, and the function's visibility changes go
// to moto through the real client, recorded on the way.
type queueHarness struct {
	*harness
	queue *sqslocal.Scratch
	vis   *recordingAPI
}

// recordingAPI is the SQS client the adapter's backoff calls, recording
// each entry's timeout and failure by receipt handle on the way to moto.
type recordingAPI struct {
	*sqs.Client
	mu        sync.Mutex
	requested map[string]time.Duration
	failed    map[string]error
}

func (r *recordingAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := r.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[string]string{}
	for _, e := range in.Entries {
		r.requested[aws.ToString(e.ReceiptHandle)] = time.Duration(e.VisibilityTimeout) * time.Second
		byID[aws.ToString(e.Id)] = aws.ToString(e.ReceiptHandle)
		if err != nil {
			r.failed[aws.ToString(e.ReceiptHandle)] = err
		}
	}
	if out != nil {
		for _, f := range out.Failed {
			r.failed[byID[aws.ToString(f.Id)]] = errors.New(aws.ToString(f.Code))
		}
	}
	return out, err
}

// get returns the timeout requested for the message with this receipt
// handle, and why its change failed.
func (r *recordingAPI) get(receiptHandle string) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requested[receiptHandle], r.failed[receiptHandle]
}

func newQueueHarness(t *testing.T, mods ...func(*harnessOptions)) *queueHarness {
	t.Helper()
	client := sqslocal.Client(sqslocal.Endpoint(t))
	vis := &recordingAPI{Client: client, requested: map[string]time.Duration{}, failed: map[string]error{}}
	h := newHarness(t, append(mods, func(o *harnessOptions) { o.visibility = vis })...)
	return &queueHarness{harness: h, queue: sqslocal.NewScratch(t, client, false, nil), vis: vis}
}

// deliver sends body to the queue, receives it (as the event source does)
// and invokes the handler with that one record, with receiveCount standing
// for how many times SQS has delivered it before (0: use the real count).
func (q *queueHarness) deliver(t *testing.T, body string, receiveCount string) (events.SQSMessage, events.SQSEventResponse) {
	t.Helper()
	q.queue.Send(t, body, "")
	recs := q.queue.Receive(t, 1, 30)
	if len(recs) != 1 {
		t.Fatalf("received %d messages; want 1", len(recs))
	}
	if receiveCount != "" {
		recs[0].Attributes["ApproximateReceiveCount"] = receiveCount
	}
	payload, err := json.Marshal(events.SQSEvent{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	out, err := q.router.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	return recs[0], out.(events.SQSEventResponse)
}

func TestSQSTransientAfterInCallAttemptsGoesBackWithBackoff(t *testing.T) {
	q := newQueueHarness(t)
	q.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
	m, resp := q.deliver(t, bodyA, "")
	if f := failed(resp); !cmp.Equal(f, []string{m.MessageId}) {
		t.Fatalf("failures %v; want the message back in the queue", f)
	}
	if d, err := q.vis.get(m.ReceiptHandle); d != 10*time.Second || err != nil {
		t.Errorf("visibility requested %v (err %v); want 10 s, the first backoff step", d, err)
	}
	rec := q.item(namespace + "#" + keyA)
	if attrS(rec, "status") != "FAILED" || !rec["retryable"].(*typesBool).Value || attrN(rec, "attempts") != "3" || attrS(rec, "error_code") != "TRANSIENT_FAILURE" {
		t.Errorf("record %v; want released: FAILED, retryable, 3 attempts, TRANSIENT_FAILURE", rec)
	}
	// The last error is the attempt's log line's, not the record's.
	if !strings.Contains(q.logs.String(), `"msg":"attempt failed","key":"`+keyA+`","code":"TRANSIENT_FAILURE"`) || !strings.Contains(q.logs.String(), "downstream replied 503") {
		t.Errorf("logs %s; want the attempt's line with the key and the last error", q.logs.String())
	}
	if n := q.down.Count(keyA); n != 3 {
		t.Errorf("deliveries %d; want 3 in-call attempts", n)
	}
}

func TestSQSStillFailingOnLaterDeliveriesIsNeverAcknowledged(t *testing.T) {
	q := newQueueHarness(t)
	for _, tc := range []struct {
		receive string
		want    time.Duration
	}{{"6", 80 * time.Second}, {"10", 80 * time.Second}, {"50", 80 * time.Second}, {"3", 40 * time.Second}} {
		q.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
		m, resp := q.deliver(t, bodyA, tc.receive)
		if f := failed(resp); !cmp.Equal(f, []string{m.MessageId}) {
			t.Fatalf("delivery %s: failures %v; want the message back in the queue", tc.receive, f)
		}
		if d, _ := q.vis.get(m.ReceiptHandle); d != tc.want {
			t.Errorf("delivery %s: visibility %v; want %v", tc.receive, d, tc.want)
		}
	}
	if rec := q.item(namespace + "#" + keyA); attrS(rec, "status") != "FAILED" || !rec["retryable"].(*typesBool).Value {
		t.Errorf("record %v; want still released, never a stored failure", rec)
	}
}

func TestSQSHealedDownstreamNextDeliveryRunsOnce(t *testing.T) {
	q := newQueueHarness(t)
	q.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
	q.deliver(t, bodyA, "")
	m, resp := q.deliver(t, bodyA, "2")
	if f := failed(resp); len(f) != 0 {
		t.Fatalf("failures %v; want the healed delivery acknowledged", f)
	}
	if n := q.down.Count(keyA); n != 4 {
		t.Errorf("deliveries %d; want 4 (3 failed, 1 success)", n)
	}
	if d, _ := q.vis.get(m.ReceiptHandle); d != 0 {
		t.Errorf("an acknowledged message got visibility %v; want none requested", d)
	}
	if rec := q.item(namespace + "#" + keyA); attrS(rec, "status") != "SUCCEEDED" || attrN(rec, "attempts") != "4" {
		t.Errorf("record %v; want SUCCEEDED at attempt 4", rec)
	}
}

func TestSQSPerKeyCapReachedIsStoredAndCounted(t *testing.T) {
	q := newQueueHarness(t, func(o *harnessOptions) { o.retry.AttemptsPerKey = 3 })
	q.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
	_, resp := q.deliver(t, bodyA, "")
	if f := failed(resp); len(f) != 0 {
		t.Fatalf("failures %v; want RETRY_EXHAUSTED acknowledged", f)
	}
	if rec := q.item(namespace + "#" + keyA); attrS(rec, "error_code") != "RETRY_EXHAUSTED" || rec["retryable"].(*typesBool).Value {
		t.Errorf("record %v; want a stored RETRY_EXHAUSTED", rec)
	}
	if !strings.Contains(q.metrics.String(), `"retry_exhausted":1`) {
		t.Errorf("metrics %s; want retry_exhausted counted", q.metrics.String())
	}
}

func TestSQSDownstreamRetryAfter120SetsTheVisibility(t *testing.T) {
	q := newQueueHarness(t)
	q.down.Script(keyA, fakewebhook.Reply{Status: 429, RetryAfter: "120"})
	m, resp := q.deliver(t, bodyA, "")
	if f := failed(resp); len(f) != 1 {
		t.Fatalf("failures %v; want the message back", f)
	}
	if d, err := q.vis.get(m.ReceiptHandle); d != 120*time.Second || err != nil {
		t.Errorf("visibility %v (err %v); want exactly the downstream's 120 s", d, err)
	}
}

func TestSQSInProgressDuplicateComesBackWhenTheLeaseEnds(t *testing.T) {
	q := newQueueHarness(t)
	// The first delivery's webhook call is held until the duplicate is done.
	hold := make(chan struct{})
	q.down.Script(keyA, fakewebhook.Reply{Hold: hold})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = q.router.Invoke(ctx, loadSQS(t, false, msg{id: "first", body: bodyA}))
	}()
	waitFor(t, func() bool { return q.down.Count(keyA) > 0 })
	var leaseMS int64
	_ = json.Unmarshal([]byte(attrN(q.item(namespace+"#"+keyA), "lease_until")), &leaseMS)
	lease := time.UnixMilli(leaseMS)
	before := time.Now()
	m, resp := q.deliver(t, bodyA, "")
	after := time.Now()
	close(hold)
	<-done
	if f := failed(resp); len(f) != 1 {
		t.Fatalf("failures %v; want the duplicate back", f)
	}
	// The holder's time left, plus the margin, rounded up to seconds, as
	// seen at some instant between before and after.
	ceil := func(d time.Duration) time.Duration { return (d + time.Second - 1).Truncate(time.Second) }
	lo, hi := ceil(lease.Sub(after)+sqsvisibility.InProgressMargin), ceil(lease.Sub(before)+sqsvisibility.InProgressMargin)
	if d, _ := q.vis.get(m.ReceiptHandle); d < lo || d > hi {
		t.Errorf("visibility %v; want the lease's time left plus the margin, in [%v, %v]", d, lo, hi)
	}
}

func TestSQSVisibilityChangeFailureKeepsTheOutcome(t *testing.T) {
	q := newQueueHarness(t)
	q.down.Script(keyA, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
	q.queue.Send(t, bodyA, "")
	recs := q.queue.Receive(t, 1, 30)
	recs[0].ReceiptHandle = "a-receipt-handle-moto-does-not-know"
	payload, _ := json.Marshal(events.SQSEvent{Records: recs})
	out, err := q.router.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	if f := failed(out.(events.SQSEventResponse)); len(f) != 1 {
		t.Fatalf("failures %v; want the message still reported failed", f)
	}
	if _, err := q.vis.get(recs[0].ReceiptHandle); err == nil {
		t.Fatal("moto accepted an unknown receipt handle; the test proves nothing")
	}
	if !strings.Contains(q.logs.String(), "visibility not changed") || !strings.Contains(q.metrics.String(), `"visibility_change_failed":1`) {
		t.Errorf("the failure is not logged and counted")
	}
}

// --- The same table for the API ---

func TestAPITransientIs503AndKeepsFailingWithoutStoring(t *testing.T) {
	h := newHarness(t)
	for i := 1; i <= 50; i++ {
		h.down.Script(downKey, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
		resp := h.api(context.Background(), apiRequest(t, clientKey, apiBody))
		if resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" || problemCode(t, resp) != "TRANSIENT_FAILURE" {
			t.Fatalf("request %d: %d %v %s; want 503 with Retry-After", i, resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	healed := h.api(context.Background(), apiRequest(t, clientKey, apiBody))
	if healed.StatusCode != 200 || healed.Headers["Idempotent-Replayed"] != "" {
		t.Fatalf("after healing: %d %v; want a fresh 200", healed.StatusCode, healed.Headers)
	}
	if again := h.api(context.Background(), apiRequest(t, clientKey, apiBody)); again.Headers["Idempotent-Replayed"] != "true" {
		t.Errorf("the next request ran again: %v", again.Headers)
	}
	if n := h.down.Count(downKey); n != 151 {
		t.Errorf("deliveries %d; want 151 (50 × 3 failed, then 1)", n)
	}
}

func TestAPIPerKeyCapReachedIs422(t *testing.T) {
	h := newHarness(t, func(o *harnessOptions) { o.retry.AttemptsPerKey = 3 })
	h.down.Script(downKey, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503}, fakewebhook.Reply{Status: 503})
	resp := h.api(context.Background(), apiRequest(t, clientKey, apiBody))
	if resp.StatusCode != 422 || problemCode(t, resp) != string(idem.CodeRetryExhausted) {
		t.Fatalf("got %d %s; want 422 RETRY_EXHAUSTED", resp.StatusCode, resp.Body)
	}
}

func TestAPIDownstreamRetryAfter120IsPassedOn(t *testing.T) {
	h := newHarness(t)
	h.down.Script(downKey, fakewebhook.Reply{Status: 503, RetryAfter: "120"})
	resp := h.api(context.Background(), apiRequest(t, clientKey, apiBody))
	if resp.StatusCode != 503 || resp.Headers["Retry-After"] != "120" {
		t.Fatalf("got %d %v; want 503 with Retry-After: 120", resp.StatusCode, resp.Headers)
	}
}

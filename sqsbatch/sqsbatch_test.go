package sqsbatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

const (
	arn     = "arn:aws:sqs:us-east-1:123456789012:orders"
	fifoARN = "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
	// pause is the engine's SentPause: longer than the fixture's first
	// backoff (10 s), so that a row shows which of the two a delay follows.
	pause = 15 * time.Second
)

// order is the event type of the tests. Reply scripts what the function
// does with it (see fixture.work).
type order struct {
	ID     string `json:"id"`
	Reply  string `json:"reply,omitempty"`
	Amount int    `json:"amount,omitempty"`
}

func orderKey(o order) (string, error) { return oncely.Key("order", o.ID) }

// body is an order's JSON body.
func body(id, reply string) string {
	b, _ := json.Marshal(order{ID: id, Reply: reply})
	return string(b)
}

// fakeSQS stands for the SQS API's ChangeMessageVisibilityBatch: it
// records each entry's requested timeout by receipt handle, and fails the
// entries whose handle is in failEntry, or the whole call when failCall is
// set.
type fakeSQS struct {
	mu        sync.Mutex
	calls     int
	changes   map[string]time.Duration
	failEntry map[string]bool
	failCall  error
}

func newFakeSQS() *fakeSQS {
	return &fakeSQS{changes: map[string]time.Duration{}, failEntry: map[string]bool{}}
}

func (f *fakeSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failCall != nil {
		return nil, f.failCall
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		rh := aws.ToString(e.ReceiptHandle)
		if f.failEntry[rh] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"),
				Message: aws.String("The receipt handle is not valid"), SenderFault: true})
			continue
		}
		f.changes[rh] = time.Duration(e.VisibilityTimeout) * time.Second
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// requested returns the timeout requested for receipt handle rh, and the
// number of calls made.
func (f *fakeSQS) requested(rh string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.changes[rh]
	return d, ok
}

func (f *fakeSQS) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// syncBuffer is a log sink safe to read while abandoned work still logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// countingStore is the in-memory store, counting its reservations.
type countingStore struct {
	*oncelytest.Store
	mu       sync.Mutex
	reserves int
}

func (s *countingStore) Reserve(ctx context.Context, r driver.Reservation) (driver.Record, bool, error) {
	s.mu.Lock()
	s.reserves++
	s.mu.Unlock()
	return s.Store.Reserve(ctx, r)
}

func (s *countingStore) reserveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserves
}

type fixture struct {
	store  *countingStore
	clock  *oncelytest.Clock
	sqs    *fakeSQS
	engine *oncely.Engine
	logs   *syncBuffer
	handle func(context.Context, events.SQSEvent) (events.SQSEventResponse, []sqsbatch.Result, error)
	keys   *keyexpr.Extractor // set when the fixture decodes with Expr

	mu   sync.Mutex
	runs map[string]int // executions of the function by order id
	seq  []string       // order ids in the order the function started them
}

// setup configures a fixture before its handler is built.
type setup struct {
	opts      sqsbatch.Options
	noBackoff bool
	expr      *keyexpr.Extractor      // decode with Expr(expr) instead of JSON(orderKey)
	decoder   sqsbatch.Decoder[order] // decode with this instead of JSON(orderKey)
	store     driver.Store            // the engine's store, instead of the counting one
	work      func(ctx context.Context, o order) ([]byte, oncely.Effects, error)
}

// newFixture builds a handler over the in-memory store, with a
// deterministic engine (a frozen clock, the largest jitter, no sleeping)
// and Backoff through a fakeSQS (Base 10 s, Max 1 min).
func newFixture(t testing.TB, mods ...func(*setup)) *fixture {
	t.Helper()
	f := &fixture{store: &countingStore{Store: oncelytest.NewStore()}, clock: oncelytest.NewClock(time.Now()),
		sqs: newFakeSQS(), logs: &syncBuffer{}, runs: map[string]int{}}
	s := setup{opts: sqsbatch.Options{MaxBodyBytes: 4096}}
	for _, m := range mods {
		m(&s)
	}
	var store driver.Store = f.store
	if s.store != nil {
		store = s.store
	}
	ie, err := idem.New(idem.Options{Store: store, Lease: time.Minute, SentPause: pause,
		Logger: slog.New(slog.NewJSONHandler(f.logs, nil)), Now: f.clock.Now,
		Retry: idem.RetryPolicy{AttemptsPerDelivery: 2, Base: time.Millisecond, Max: time.Millisecond},
		Sleep: func(context.Context, time.Duration) error { return nil }, Random: func() float64 { return 0.999 }})
	if err != nil {
		t.Fatal(err)
	}
	f.engine = engineref.Wrap(ie).(*oncely.Engine)
	if !s.noBackoff && s.opts.Backoff == nil {
		s.opts.Backoff = &sqsbatch.Backoff{SQS: f.sqs, Base: 10 * time.Second, Max: time.Minute}
	}
	work := f.work
	if s.work != nil {
		work = s.work
	}
	if s.expr != nil {
		f.keys = s.expr
		h, err := sqsbatch.New(f.engine, sqsbatch.Expr(s.expr), func(ctx context.Context, raw json.RawMessage) ([]byte, oncely.Effects, error) {
			var o order
			_ = json.Unmarshal(raw, &o)
			return work(ctx, o)
		}, s.opts)
		if err != nil {
			t.Fatal(err)
		}
		f.handle = h.Handle
		return f
	}
	d := s.decoder
	if d == nil {
		d = sqsbatch.JSON(orderKey)
	}
	h, err := sqsbatch.New(f.engine, d, work, s.opts)
	if err != nil {
		t.Fatal(err)
	}
	f.handle = h.Handle
	return f
}

// work is the team's function: it counts its runs and does what the
// order's Reply says.
func (f *fixture) work(ctx context.Context, o order) ([]byte, oncely.Effects, error) {
	f.mu.Lock()
	f.runs[o.ID]++
	f.seq = append(f.seq, o.ID)
	f.mu.Unlock()
	switch o.Reply {
	case "transient":
		return nil, nil, oncely.Transient(errors.New("503"))
	case "retry-after":
		return nil, nil, oncely.TransientAfter(errors.New("429"), 120*time.Second)
	case "gateway-504":
		// A gateway's 504 with Retry-After: 1 after its upstream timed out:
		// the origin may have the request.
		return nil, nil, &oncely.ClassifiedError{Class: oncely.ClassTransient, Sent: true, RetryAfter: time.Second, Err: errors.New("504")}
	case "sent":
		return nil, nil, oncely.TransientSent(errors.New("timed out once written"))
	case "permanent":
		return nil, nil, oncely.PermanentCode("HTTP_404", errors.New("404"))
	case "panic":
		panic("the function hit a bug")
	}
	return []byte(`{"ok":true}`), nil, nil
}

func (f *fixture) runCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

// note returns the poison note stored for message id.
func (f *fixture) note(t testing.TB, id string) (driver.Poison, bool) {
	t.Helper()
	p, ok, err := f.store.GetPoison(context.Background(), id, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p, ok
}

// rec is one test message: its id (and receipt handle "rh-"+id), body,
// FIFO group and receive count.
type rec struct {
	id, body, group string
	receive         int
}

func batch(fifo bool, recs ...rec) events.SQSEvent {
	var ev events.SQSEvent
	for _, r := range recs {
		m := events.SQSMessage{MessageId: r.id, ReceiptHandle: "rh-" + r.id, Body: r.body, EventSource: "aws:sqs", EventSourceARN: arn,
			Attributes: map[string]string{"ApproximateReceiveCount": fmt.Sprint(max(r.receive, 1))}}
		if fifo {
			m.EventSourceARN = fifoARN
			m.Attributes["MessageGroupId"] = r.group
		}
		ev.Records = append(ev.Records, m)
	}
	return ev
}

// run handles a batch and fails the test on an error.
func (f *fixture) run(t testing.TB, ev events.SQSEvent) (events.SQSEventResponse, []sqsbatch.Result) {
	t.Helper()
	resp, results, err := f.handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(ev.Records) {
		t.Fatalf("%d results for %d records", len(results), len(ev.Records))
	}
	return resp, results
}

// failures are the batchItemFailures' identifiers, in order.
func failures(resp events.SQSEventResponse) []string {
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// byID indexes results by message id.
func byID(results []sqsbatch.Result) map[string]sqsbatch.Result {
	m := map[string]sqsbatch.Result{}
	for _, r := range results {
		m[r.MessageID] = r
	}
	return m
}

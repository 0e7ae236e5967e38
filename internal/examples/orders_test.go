package examples_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/dynamostore"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/esm"
	"github.com/oncely/oncely/internal/testing/samtemplate"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// drainDeadline bounds the wait for the queue to empty: generous, for a
// loaded machine (a failed order comes back after the function's 1 s
// backoff; without it, after the queue's 180 s).
const drainDeadline = 90 * time.Second

// charge is one call the fake payment API got.
type charge struct {
	orderID, key string
	status       int
}

// payments is a fake payment API: it records every call, and answers
// 503 to the orders in busyOnce on their first call, 400 to a body
// without an order id, and 201 otherwise.
type payments struct {
	mu       sync.Mutex
	calls    []charge
	busyOnce map[string]bool
}

func (p *payments) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		OrderID string `json:"orderId"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	defer p.mu.Unlock()
	status := http.StatusCreated
	switch {
	case body.OrderID == "":
		status = http.StatusBadRequest
	case p.busyOnce[body.OrderID]:
		delete(p.busyOnce, body.OrderID)
		status = http.StatusServiceUnavailable
	}
	p.calls = append(p.calls, charge{orderID: body.OrderID, key: r.Header.Get("Idempotency-Key"), status: status})
	rw.WriteHeader(status)
	fmt.Fprintf(rw, `{"status":%d}`, status)
}

// of returns the calls for one order.
func (p *payments) of(orderID string) []charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []charge
	for _, c := range p.calls {
		if c.orderID == orderID {
			out = append(out, c)
		}
	}
	return out
}

// delivery is one receive of a message by the event source mapping.
type delivery struct {
	receiveCount int
	deleted      bool
}

// orders is the example running under the emulator, fed by the event
// source mapping stand-in from a queue pair made from its template.
type orders struct {
	t      *testing.T
	pay    *payments
	sqs    *sqs.Client
	pair   sqslocal.Pair
	runner *esm.Runner
	store  *dynamostore.Store

	mu         sync.Mutex
	deliveries map[string][]delivery // by message id
	recorded   int                   // deliveries recorded, all messages
}

// startOrders starts the payment API, local DynamoDB (minidyn) and the
// queue pair the template declares (on the local SQS, its times as
// deployed), the function under the emulator with the template's
// environment (RETRY_BASE 1s instead of 30s), and the event source
// mapping stand-in with the template's settings.
func startOrders(t *testing.T) *orders {
	t.Helper()
	requireEmulator(t)
	client := sqslocal.Client(sqslocal.Endpoint(t))
	tpl, err := samtemplate.Load(filepath.Join(examplesDir, "orders", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	src, ok := tpl.Source("OrdersQueue")
	if !ok {
		t.Fatal("the template has no SQS event source on OrdersQueue")
	}
	fn := tpl.Functions[src.Function]

	o := &orders{t: t, pay: &payments{busyOnce: map[string]bool{}}, sqs: client, deliveries: map[string][]delivery{}}
	api := httptest.NewServer(o.pay)
	t.Cleanup(api.Close)
	_, ddb := ddblocal.Minidyn(t)
	ddbClient, _ := ddblocal.Client(ddblocal.Config(ddb, nil))
	table := ddblocal.NewTable(t, ddbClient)
	// The function's namespace, to read its poison notes.
	if o.store, err = dynamostore.New(ddbClient, table, dynamostore.Options{Namespace: "orders"}); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if o.pair, err = sqslocal.CreatePair(context.Background(), client, tpl, src.Queue, "orders-"+hex.EncodeToString(b[:]), 1); err != nil {
		t.Fatal(err)
	}

	env := []string{"AWS_ENDPOINT_URL_SQS=" + sqslocal.EndpointFromEnv(), "AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(fn.Timeout/time.Second))}
	for k, v := range fn.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "TABLE_NAME="+table, "PAYMENT_API_URL="+api.URL+"/charges", "RETRY_BASE=1s")
	emu := startExample(t, "orders", ddb, env...)

	o.runner, err = esm.New(client, esm.Config{QueueURL: o.pair.Source.URL, QueueARN: o.pair.Source.ARN, Region: sqslocal.Region,
		BatchSize: src.BatchSize, BatchingWindow: src.BatchingWindow, ReportBatchItemFailures: src.ReportBatchItemFailures,
		MaximumConcurrency: 1, PollInterval: 50 * time.Millisecond, OnInvocation: o.record}, []esm.Invoker{emu})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = o.runner.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			var log strings.Builder
			for _, e := range o.runner.Log() {
				log.WriteString(e.String() + "\n")
			}
			t.Logf("event source mapping:\n%s", log.String())
		}
	})
	return o
}

func (o *orders) record(inv esm.Invocation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range inv.Records {
		o.deliveries[r.MessageID] = append(o.deliveries[r.MessageID], delivery{receiveCount: r.ReceiveCount, deleted: r.Deleted})
	}
	o.recorded += len(inv.Records)
}

// of returns the deliveries of a message so far.
func (o *orders) of(messageID string) []delivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]delivery(nil), o.deliveries[messageID]...)
}

// send sends body to the orders queue and returns its message id.
func (o *orders) send(body string) string {
	o.t.Helper()
	out, err := o.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &o.pair.Source.URL, MessageBody: &body})
	if err != nil {
		o.t.Fatalf("send: %v", err)
	}
	return *out.MessageId
}

func (o *orders) depth(q sqslocal.Queue) int {
	o.t.Helper()
	d, err := sqslocal.Count(context.Background(), o.sqs, q.URL)
	if err != nil {
		o.t.Fatal(err)
	}
	return d.Total()
}

// drain waits until the orders queue holds nothing (visible, in flight or
// delayed), no batch is being invoked and every invocation's outcome is
// recorded, three checks in a row.
func (o *orders) drain() {
	o.t.Helper()
	deadline := time.Now().Add(drainDeadline)
	for quiet := 0; quiet < 3; time.Sleep(100 * time.Millisecond) {
		o.mu.Lock()
		recorded := o.recorded
		o.mu.Unlock()
		if o.depth(o.pair.Source) == 0 && !o.runner.Busy() && recorded == o.runner.Stats().Received {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("the orders queue still holds %d messages after %s (a message that went back, not given its backoff?)", o.depth(o.pair.Source), drainDeadline)
		}
	}
}

func order(id string, cents int) string {
	return fmt.Sprintf(`{"orderId":%q,"amountCents":%d,"currency":"EUR"}`, id, cents)
}

// TestOrdersThroughALocalQueue sends orders to a real local queue (moto's
// SQS) made from the example's template; the event source mapping
// stand-in invokes the example under the emulator, against a local
// DynamoDB and a fake payment API, and deletes what it acknowledges.
func TestOrdersThroughALocalQueue(t *testing.T) {
	o := startOrders(t)
	o.pay.busyOnce["o-2002"] = true

	dup1, dup2 := o.send(order("o-1001", 4200)), o.send(order("o-1001", 4200))
	busy := o.send(order("o-2002", 1999))
	notJSON := o.send("this is not an order")
	noID := o.send(`{"customer":"c-7","note":"no order id"}`)
	o.drain()

	t.Run("a duplicate order is charged once", func(t *testing.T) {
		// A third copy, once the first two are done: the stored record
		// answers it, not the payment API.
		dup3 := o.send(order("o-1001", 4200))
		o.drain()
		calls := o.pay.of("o-1001")
		if len(calls) != 1 || calls[0].status != http.StatusCreated {
			t.Fatalf("the order sent three times got the calls %+v; want one charge", calls)
		}
		if want, _ := oncely.Key("order", "o-1001", "charge"); calls[0].key != want {
			t.Errorf("Idempotency-Key %q; want %q: the order's key", calls[0].key, want)
		}
		for _, id := range []string{dup1, dup2, dup3} {
			if d := o.of(id); len(d) != 1 || !d[0].deleted {
				t.Errorf("message %s: deliveries %+v; want one, acknowledged", id, d)
			}
		}
	})

	t.Run("a transient failure goes back to the queue and is charged on a later delivery", func(t *testing.T) {
		calls := o.pay.of("o-2002")
		if len(calls) != 2 || calls[0].status != http.StatusServiceUnavailable || calls[1].status != http.StatusCreated || calls[0].key != calls[1].key {
			t.Fatalf("the order answered 503 once got the calls %+v; want the 503, then one charge with the same key", calls)
		}
		d := o.of(busy)
		if len(d) != 2 || d[0].deleted || d[0].receiveCount != 1 || !d[1].deleted || d[1].receiveCount != 2 {
			t.Errorf("its deliveries %+v; want the first returned to the queue, the second (receive 2) acknowledged", d)
		}
	})

	t.Run("a body that is not an order is a poison note, acknowledged", func(t *testing.T) {
		for _, tc := range []struct {
			name, id string
			code     oncely.Code
		}{
			{"not JSON", notJSON, oncely.CodeInvalidPayload},
			{"no order id", noID, oncely.CodeInvalidKey},
		} {
			note, ok, err := o.store.GetPoison(context.Background(), tc.id, time.Now())
			if err != nil || !ok || note.Reason != tc.code {
				t.Errorf("%s: poison note %+v, found %v, %v; want one with reason %s", tc.name, note, ok, err, tc.code)
			}
			if d := o.of(tc.id); len(d) != 1 || !d[0].deleted {
				t.Errorf("%s: deliveries %+v; want one, acknowledged", tc.name, d)
			}
		}
		if calls := o.pay.of(""); len(calls) != 0 {
			t.Errorf("the payment API got %d calls without an order id; want none", len(calls))
		}
		if n := o.depth(o.pair.DLQ); n != 0 {
			t.Errorf("the DLQ holds %d messages; want none", n)
		}
	})
}

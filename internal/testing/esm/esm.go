// Package esm is a local stand-in for Lambda's SQS event source mapping: it
// polls a queue on a local SQS server, invokes the function (the real
// bootstrap under the Runtime Interface Emulator) with the real SQS event
// shape, and deletes exactly the messages the function acknowledged. The
// demo, the soak and the queue-driven end-to-end tests run the function
// through it, with the settings of template.yaml (package samtemplate).
//
// It is test support; no shipped command links it.
//
// # What it emulates (as the AWS documentation describes the mapping)
//
//   - Polling: up to BatchSize messages per batch, receiving until the batch
//     is full or MaximumBatchingWindowInSeconds has passed since its first
//     message (FIFO queues take no window), with every system attribute and
//     message attribute, at the queue's own visibility timeout.
//   - The event: Records with messageId, receiptHandle, body, attributes
//     (ApproximateReceiveCount, SentTimestamp, SenderId,
//     ApproximateFirstReceiveTimestamp, and MessageGroupId,
//     MessageDeduplicationId, SequenceNumber on FIFO), messageAttributes,
//     md5OfBody, md5OfMessageAttributes, eventSource "aws:sqs",
//     eventSourceARN (the queue's ARN as the server reports it) and awsRegion.
//   - Concurrency: at most MaximumConcurrency batches at once, each on its
//     own Invoker (the emulator crashes on two concurrent invokes).
//   - Partial batch responses (ReportBatchItemFailures): every message not
//     listed in batchItemFailures is deleted. A complete success is an empty
//     body, null, an object without batchItemFailures or with an empty or
//     null list. A complete failure, where nothing is deleted, is a function
//     error (the emulator answers with errorType/errorMessage: handler
//     errors, timeouts, crashes), an invoke that got no answer, invalid
//     JSON, a body that is not an object, a batchItemFailures that is not a
//     list, an entry that is not an object, an entry without the exact key
//     itemIdentifier, or an itemIdentifier that is null, empty, or not a
//     messageId of the batch. Without ReportBatchItemFailures, any answer
//     but a function error deletes the whole batch.
//   - FIFO: records are passed in the order the queue returned them; the
//     queue itself holds a message group while any of its messages is in
//     flight, so a group's messages are never in two batches at once.
//
// # What it does not emulate
//
//   - Long polling. Polls do not wait (WaitTimeSeconds 0): moto serves a long
//     poll by waiting inside the request, which on its single worker thread
//     stalls every other call, and moto's SQS is not safe on several threads
//     (receives and deletes take no lock). An empty poll is followed by a
//     pause of PollInterval instead.
//   - Scaling: the mapping's ramp-up (five batches, then up to 300 more
//     instances a minute), its backoff after function errors, throttling,
//     and its poller count. The runner polls with one poller and keeps
//     MaximumConcurrency invocations busy whenever messages are visible.
//   - The 6 MB payload limit of a batch, the function's reserved
//     concurrency, filter criteria, and the mapping's own metrics.
//   - Its own retries of a failed DeleteMessage (a failure is logged; the
//     message comes back after its visibility timeout, as it would on AWS
//     once Lambda gave up).
//   - Visibility: the runner never changes a message's visibility; a failed
//     message comes back when its visibility timeout (the queue's, or the
//     one the function set) runs out, as on AWS.
package esm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Invoker invokes the function once and returns its response body. An
// error means no answer came (the invoke itself failed). One Invoker never
// gets two invokes at once. *rie.Emulator is an Invoker.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// InvokerFunc adapts a function to Invoker.
type InvokerFunc func(ctx context.Context, payload []byte) ([]byte, error)

// Invoke implements Invoker.
func (f InvokerFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f(ctx, payload)
}

// Defaults for [Config].
const (
	DefaultPollInterval  = 100 * time.Millisecond
	DefaultInvokeTimeout = 15 * time.Minute // Lambda's longest function timeout
	maxReceive           = 10               // SQS's limit per ReceiveMessage
)

// Config is one event source mapping.
type Config struct {
	// Queue is the source queue's URL and ARN (as the server reports it).
	QueueURL, QueueARN string
	// Region is the event's awsRegion.
	Region string
	// FIFO: the queue is a FIFO queue (no batching window).
	FIFO bool
	// BatchSize is the most records per invocation. Zero means 10.
	BatchSize int
	// BatchingWindow is MaximumBatchingWindowInSeconds (scaled, if the run
	// scales time). Ignored for FIFO queues.
	BatchingWindow time.Duration
	// MaximumConcurrency is ScalingConfig.MaximumConcurrency: batches in
	// flight at once. Zero means one per Invoker. It may not exceed the
	// number of Invokers.
	MaximumConcurrency int
	// ReportBatchItemFailures is FunctionResponseTypes:
	// [ReportBatchItemFailures].
	ReportBatchItemFailures bool
	// PollInterval is the pause after an empty poll, and between polls
	// while a batching window is open. Zero means DefaultPollInterval.
	PollInterval time.Duration
	// InvokeTimeout bounds one invoke, beyond the function's own timeout
	// (which the emulator enforces). Zero means DefaultInvokeTimeout.
	InvokeTimeout time.Duration
	// Name labels the log lines (default: the queue's name).
	Name string
	// Log, if set, receives every log entry as a line of text.
	Log io.Writer
	// OnInvocation, if set, is called after each invocation, with what
	// happened to each of its records. It runs on the invocation's
	// goroutine, before the slot takes another batch.
	OnInvocation func(Invocation)
}

// Runner polls one queue and invokes the function. Create it with New and
// run it with Run.
type Runner struct {
	cfg      Config
	client   *sqs.Client
	invokers []Invoker

	seq atomic.Int64

	mu       sync.Mutex
	log      []Entry
	inFlight map[int]Flight
	stats    Stats
}

// New returns a Runner for cfg, invoking through invokers (one per
// concurrent batch).
func New(client *sqs.Client, cfg Config, invokers []Invoker) (*Runner, error) {
	if cfg.QueueURL == "" || cfg.QueueARN == "" {
		return nil, errors.New("esm: Config.QueueURL and QueueARN are required")
	}
	if len(invokers) == 0 {
		return nil, errors.New("esm: at least one Invoker is required")
	}
	if cfg.MaximumConcurrency == 0 {
		cfg.MaximumConcurrency = len(invokers)
	}
	if cfg.MaximumConcurrency > len(invokers) {
		return nil, fmt.Errorf("esm: MaximumConcurrency %d needs as many Invokers, got %d (one emulator per concurrent invoke)", cfg.MaximumConcurrency, len(invokers))
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 10
	}
	if cfg.FIFO {
		cfg.BatchingWindow = 0 // FIFO queues take no batching window
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.InvokeTimeout <= 0 {
		cfg.InvokeTimeout = DefaultInvokeTimeout
	}
	if cfg.Name == "" {
		cfg.Name = cfg.QueueARN[strings.LastIndexByte(cfg.QueueARN, ':')+1:]
	}
	return &Runner{cfg: cfg, client: client, invokers: invokers[:cfg.MaximumConcurrency], inFlight: map[int]Flight{}}, nil
}

// Op is what a log entry records.
type Op string

// The log entries' operations.
const (
	OpReceived     Op = "received"      // a message joined a batch
	OpInvoked      Op = "invoked"       // a batch went to the function
	OpFailed       Op = "batch_failed"  // the invocation failed as a whole: nothing deleted
	OpDeleted      Op = "deleted"       // acknowledged and deleted
	OpReturned     Op = "returned"      // in batchItemFailures: left to come back
	OpDeleteFailed Op = "delete_failed" // acknowledged, but the delete failed
	OpPollFailed   Op = "poll_failed"   // a ReceiveMessage failed
)

// Entry is one line of the runner's log.
type Entry struct {
	At         time.Time
	Queue      string
	Slot       int
	Invocation int64
	Op         Op
	MessageID  string // empty for invocation-level entries
	// ReceiveCount is the message's ApproximateReceiveCount in this batch.
	ReceiveCount int
	Detail       string
}

// String formats the entry as one log line.
func (e Entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s esm[%s] slot=%d inv=%d %s", e.At.Format("15:04:05.000"), e.Queue, e.Slot, e.Invocation, e.Op)
	if e.MessageID != "" {
		fmt.Fprintf(&b, " msg=%s receive=%d", e.MessageID, e.ReceiveCount)
	}
	if e.Detail != "" {
		b.WriteString(" " + e.Detail)
	}
	return b.String()
}

// Flight is a batch being invoked.
type Flight struct {
	Slot       int
	Invocation int64
	Started    time.Time
	MessageIDs []string
	Bodies     []string
}

// Record is what happened to one record of an invocation.
type Record struct {
	MessageID    string
	ReceiveCount int
	Body         string
	Attributes   map[string]string
	Deleted      bool
}

// Invocation is one invoke and its outcome.
type Invocation struct {
	ID       int64
	Slot     int
	Started  time.Time
	Ended    time.Time
	Records  []Record
	Response []byte
	// Failure says why nothing was deleted; empty when the response was
	// read (all acknowledged messages were then deleted, or their delete
	// failed).
	Failure string
}

// Stats counts what the runner did.
type Stats struct {
	Polls, EmptyPolls, Invocations, FailedInvocations int
	Received, Deleted, Returned, DeleteFailed         int
	// SQSCalls are the runner's ReceiveMessage and DeleteMessageBatch
	// calls; SQSTime their total time, SQSMax the longest.
	SQSCalls        int
	SQSTime, SQSMax time.Duration
}

// Log returns a copy of the log so far.
func (r *Runner) Log() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// Stats returns the counts so far.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// InFlight returns the batches being invoked now.
func (r *Runner) InFlight() []Flight {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Flight, 0, len(r.inFlight))
	for _, f := range r.inFlight {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Flight) int { return a.Slot - b.Slot })
	return out
}

// Busy reports whether any batch is being invoked.
func (r *Runner) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inFlight) > 0
}

func (r *Runner) record(e Entry) {
	e.At = time.Now()
	e.Queue = r.cfg.Name
	r.mu.Lock()
	r.log = append(r.log, e)
	r.mu.Unlock()
	if r.cfg.Log != nil {
		fmt.Fprintln(r.cfg.Log, e.String())
	}
}

// Run polls and invokes until ctx ends, then waits for the invocations in
// flight (they are not cut short: the emulator would be left mid-invoke).
func (r *Runner) Run(ctx context.Context) error {
	free := make(chan int, len(r.invokers))
	for i := range r.invokers {
		free <- i
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var slot int
		select {
		case <-ctx.Done():
			return nil
		case slot = <-free:
		}
		msgs := r.gather(ctx)
		if len(msgs) == 0 {
			free <- slot
			if !sleep(ctx, r.cfg.PollInterval) {
				return nil
			}
			continue
		}
		wg.Go(func() {
			defer func() { free <- slot }()
			r.invoke(context.WithoutCancel(ctx), slot, msgs)
		})
	}
}

// gather receives one batch: up to BatchSize messages, waiting up to the
// batching window after the first.
func (r *Runner) gather(ctx context.Context) []types.Message {
	var batch []types.Message
	var windowEnd time.Time
	for len(batch) < r.cfg.BatchSize {
		got, err := r.receive(ctx, min(r.cfg.BatchSize-len(batch), maxReceive))
		if err != nil {
			if ctx.Err() == nil {
				r.record(Entry{Op: OpPollFailed, Detail: err.Error()})
			}
			return batch
		}
		if len(batch) == 0 && len(got) > 0 {
			windowEnd = time.Now().Add(r.cfg.BatchingWindow)
		}
		batch = append(batch, got...)
		if len(batch) == 0 || len(batch) >= r.cfg.BatchSize {
			break
		}
		if len(got) == maxReceive {
			continue // more may be waiting right now
		}
		if !time.Now().Before(windowEnd) || !sleep(ctx, min(r.cfg.PollInterval, time.Until(windowEnd))) {
			break
		}
	}
	return batch
}

// timed counts one SQS call that started at start.
func (r *Runner) timed(start time.Time) {
	d := time.Since(start)
	r.mu.Lock()
	r.stats.SQSCalls++
	r.stats.SQSTime += d
	r.stats.SQSMax = max(r.stats.SQSMax, d)
	r.mu.Unlock()
}

func (r *Runner) receive(ctx context.Context, n int) ([]types.Message, error) {
	defer r.timed(time.Now())
	out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.cfg.QueueURL),
		MaxNumberOfMessages:         int32(n),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	r.mu.Lock()
	r.stats.Polls++
	if err == nil && len(out.Messages) == 0 {
		r.stats.EmptyPolls++
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// Event builds the SQS event Lambda would send for msgs from the queue.
func Event(msgs []types.Message, queueARN, region string) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, 0, len(msgs))}
	for _, m := range msgs {
		rec := events.SQSMessage{
			MessageId:              aws.ToString(m.MessageId),
			ReceiptHandle:          aws.ToString(m.ReceiptHandle),
			Body:                   aws.ToString(m.Body),
			Md5OfBody:              aws.ToString(m.MD5OfBody),
			Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes:             map[string]string{},
			MessageAttributes:      map[string]events.SQSMessageAttribute{},
			EventSource:            "aws:sqs",
			EventSourceARN:         queueARN,
			AWSRegion:              region,
		}
		for k, v := range m.Attributes {
			rec.Attributes[k] = v
		}
		for k, v := range m.MessageAttributes {
			rec.MessageAttributes[k] = events.SQSMessageAttribute{
				StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				StringListValues: orEmpty(v.StringListValues), BinaryListValues: orEmpty(v.BinaryListValues),
				DataType: aws.ToString(v.DataType),
			}
		}
		ev.Records = append(ev.Records, rec)
	}
	return ev
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (r *Runner) invoke(ctx context.Context, slot int, msgs []types.Message) {
	id := r.seq.Add(1)
	inv := Invocation{ID: id, Slot: slot, Started: time.Now()}
	flight := Flight{Slot: slot, Invocation: id, Started: inv.Started}
	for _, m := range msgs {
		rc, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		inv.Records = append(inv.Records, Record{MessageID: aws.ToString(m.MessageId), ReceiveCount: rc, Body: aws.ToString(m.Body), Attributes: m.Attributes})
		flight.MessageIDs = append(flight.MessageIDs, aws.ToString(m.MessageId))
		flight.Bodies = append(flight.Bodies, aws.ToString(m.Body))
		r.record(Entry{Slot: slot, Invocation: id, Op: OpReceived, MessageID: aws.ToString(m.MessageId), ReceiveCount: rc})
	}
	r.mu.Lock()
	r.inFlight[slot] = flight
	r.stats.Invocations++
	r.stats.Received += len(msgs)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inFlight, slot)
		r.mu.Unlock()
		inv.Ended = time.Now()
		if r.cfg.OnInvocation != nil {
			r.cfg.OnInvocation(inv)
		}
	}()

	payload, err := json.Marshal(Event(msgs, r.cfg.QueueARN, r.cfg.Region))
	if err != nil {
		inv.Failure = "event not encoded: " + err.Error()
		r.fail(slot, id, inv.Failure)
		return
	}
	r.record(Entry{Slot: slot, Invocation: id, Op: OpInvoked, Detail: fmt.Sprintf("%d records", len(msgs))})
	ictx, cancel := context.WithTimeout(ctx, r.cfg.InvokeTimeout)
	body, err := r.invokers[slot].Invoke(ictx, payload)
	cancel()
	inv.Response = body
	if err != nil {
		inv.Failure = "no answer: " + err.Error()
		r.fail(slot, id, inv.Failure)
		return
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = aws.ToString(m.MessageId)
	}
	failed, why := Acknowledged(body, ids, r.cfg.ReportBatchItemFailures)
	if why != "" {
		inv.Failure = why
		r.fail(slot, id, why)
		return
	}
	var del []types.Message
	for i, m := range msgs {
		if failed[ids[i]] {
			r.record(Entry{Slot: slot, Invocation: id, Op: OpReturned, MessageID: ids[i], ReceiveCount: inv.Records[i].ReceiveCount, Detail: "in batchItemFailures"})
			continue
		}
		del = append(del, m)
	}
	r.mu.Lock()
	r.stats.Returned += len(msgs) - len(del)
	r.mu.Unlock()
	deleted := r.delete(ctx, slot, id, del, inv.Records)
	for i := range inv.Records {
		inv.Records[i].Deleted = deleted[inv.Records[i].MessageID]
	}
}

func (r *Runner) fail(slot int, id int64, why string) {
	r.mu.Lock()
	r.stats.FailedInvocations++
	r.mu.Unlock()
	r.record(Entry{Slot: slot, Invocation: id, Op: OpFailed, Detail: "nothing deleted: " + why})
}

// delete deletes msgs, ten at a time, and returns the ids deleted.
func (r *Runner) delete(ctx context.Context, slot int, id int64, msgs []types.Message, recs []Record) map[string]bool {
	rc := map[string]int{}
	for _, rec := range recs {
		rc[rec.MessageID] = rec.ReceiveCount
	}
	deleted := map[string]bool{}
	for start := 0; start < len(msgs); start += maxReceive {
		chunk := msgs[start:min(start+maxReceive, len(msgs))]
		in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(r.cfg.QueueURL)}
		for i, m := range chunk {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		failed := map[int]string{}
		start := time.Now()
		out, err := r.client.DeleteMessageBatch(ctx, in)
		r.timed(start)
		if err != nil {
			for i := range chunk {
				failed[i] = err.Error()
			}
		} else {
			for _, f := range out.Failed {
				if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil {
					failed[i] = aws.ToString(f.Code) + ": " + aws.ToString(f.Message)
				}
			}
		}
		for i, m := range chunk {
			mid := aws.ToString(m.MessageId)
			if why, ok := failed[i]; ok {
				r.record(Entry{Slot: slot, Invocation: id, Op: OpDeleteFailed, MessageID: mid, ReceiveCount: rc[mid], Detail: why})
				continue
			}
			deleted[mid] = true
			r.record(Entry{Slot: slot, Invocation: id, Op: OpDeleted, MessageID: mid, ReceiveCount: rc[mid]})
		}
		r.mu.Lock()
		r.stats.Deleted += len(chunk) - len(failed)
		r.stats.DeleteFailed += len(failed)
		r.mu.Unlock()
	}
	return deleted
}

// Acknowledged reads a function's response to a batch of the messages ids.
// It returns the ids in batchItemFailures, or, when the batch failed as a
// whole (nothing may be deleted), why. See the package doc for the rules.
func Acknowledged(body []byte, ids []string, reportBatchItemFailures bool) (failed map[string]bool, whole string) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var probe map[string]json.RawMessage
		if json.Unmarshal(body, &probe) == nil {
			if _, ok := probe["errorType"]; ok {
				return nil, "function error: " + truncate(string(body), 300)
			}
			if _, ok := probe["errorMessage"]; ok {
				return nil, "function error: " + truncate(string(body), 300)
			}
		}
	}
	if !reportBatchItemFailures {
		return map[string]bool{}, ""
	}
	if len(body) == 0 {
		return map[string]bool{}, "" // an empty response: complete success
	}
	var top any
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, "malformed response: invalid JSON: " + truncate(string(body), 120)
	}
	if top == nil {
		return map[string]bool{}, "" // null: complete success
	}
	obj, ok := top.(map[string]any)
	if !ok {
		return nil, fmt.Sprintf("malformed response: want an object, got %s", truncate(string(body), 120))
	}
	// Exact key: Lambda's keys are case-sensitive (Go's decoder is not).
	list, ok := obj["batchItemFailures"]
	if !ok || list == nil {
		return map[string]bool{}, ""
	}
	entries, ok := list.([]any)
	if !ok {
		return nil, fmt.Sprintf("malformed response: batchItemFailures is not a list: %s", truncate(string(body), 120))
	}
	known := map[string]bool{}
	for _, id := range ids {
		known[id] = true
	}
	failed = map[string]bool{}
	for i, e := range entries {
		o, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Sprintf("malformed response: batchItemFailures[%d] is not an object", i)
		}
		v, ok := o["itemIdentifier"]
		if !ok {
			return nil, fmt.Sprintf("malformed response: batchItemFailures[%d] has no itemIdentifier key", i)
		}
		s, ok := v.(string)
		switch {
		case !ok:
			return nil, fmt.Sprintf("malformed response: batchItemFailures[%d].itemIdentifier is %v, not a string", i, v)
		case s == "":
			return nil, fmt.Sprintf("malformed response: batchItemFailures[%d].itemIdentifier is empty", i)
		case !known[s]:
			return nil, fmt.Sprintf("malformed response: batchItemFailures[%d].itemIdentifier %q is not a message of the batch", i, s)
		}
		failed[s] = true
	}
	return failed, ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Package sqsbatch makes an SQS-triggered Lambda function idempotent, for
// any message type: each message runs the team's function at most once for
// its key, and the batch answers with partial batch failures
// (ReportBatchItemFailures).
//
// The rule it keeps: no message is acknowledged unless a record says what
// happened to it. A message is acknowledged when its success or permanent
// failure is stored, or when a poison note about it is stored (a body the
// decoder refuses); every other message goes in batchItemFailures and SQS
// delivers it again, after a delay of its own when [Options].Backoff is
// set. Besides:
//   - copies of one message in one batch run once, and share the outcome
//     (instead of the second going back as IN_PROGRESS);
//   - a FIFO queue's message group stops at its first failure: the rest of
//     the group goes back unrun, in order;
//   - a panic in one message's function or decoder never takes down the
//     batch: the function's is a stored failure (PANIC), the decoder's
//     sends the message back.
//
// The event source mapping must report batch item failures
// (FunctionResponseTypes: [ReportBatchItemFailures]); without it, one
// failed message sends the whole batch back.
//
// The engine's in-call retries (oncely.RetryPolicy.AttemptsPerDelivery)
// sleep while the rest of the batch waits for the invocation to end. A
// queue consumer with [Backoff] set usually wants AttemptsPerDelivery: 1:
// a transient failure then goes back to the queue at once and waits there,
// for its own delay, instead of inside the batch.
package sqsbatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsvisibility"
)

// Defaults for [Options].
const (
	// DefaultMaxConcurrency is Options.MaxConcurrency's default.
	DefaultMaxConcurrency = 10
	// DefaultMaxBodyBytes is Options.MaxBodyBytes' default: 1 MiB, SQS's
	// largest message.
	DefaultMaxBodyBytes = idem.DefaultMaxEventBytes
)

// Options configure a [Handler]. Every field documents its zero value.
// The clock, the jitter, the logger and the poison notes' retention are
// the engine's (see oncely.Options).
type Options struct {
	// MaxConcurrency bounds the messages (standard queue) or message
	// groups (FIFO) processed at once. Zero means DefaultMaxConcurrency.
	MaxConcurrency int
	// MaxBodyBytes refuses larger bodies with a TOO_LARGE poison note,
	// before the decoder sees them. Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Poison stores the notes about messages the decoder refused. Nil means
	// the engine's store, which must then implement driver.PoisonRecorder
	// (dynamostore and oncelytest's stores do).
	Poison driver.PoisonRecorder
	// Backoff, if set, gives each message that goes back to the queue a
	// delay of its own, with ChangeMessageVisibility. Nil leaves the
	// queue's visibility timeout to every message that goes back.
	Backoff *Backoff
}

// Backoff is the per-message delay of messages that go back to the queue:
// a transient failure waits Base·2^(n-1) for its nth receive (capped at
// Max, with jitter), a Retry-After the function's error carries (see
// oncely.TransientAfter) at least that, a message whose key another worker
// holds the time that worker has left, and a request that may have reached
// its receiver at least the engine's SentPause. A failed change is logged
// and counted in [Result].VisibilityErr; the message then returns at the
// queue's visibility timeout.
type Backoff struct {
	// SQS is the team's SQS client (*sqs.Client). Its role needs
	// sqs:ChangeMessageVisibility on the queue.
	SQS VisibilityAPI
	// Base is the first delay. Zero means 30 s.
	Base time.Duration
	// Max caps a delay. Zero means 15 min. SQS's own cap is 12 h.
	Max time.Duration
}

// RequiredIAMActions are exactly the IAM actions [Backoff] calls, to grant
// on the queue (besides what the event source mapping needs; the batch
// call is authorised by the single-message action).
func RequiredIAMActions() []string { return sqsvisibility.RequiredIAMActions() }

// VisibilityAPI is the part of *sqs.Client that [Backoff] calls.
type VisibilityAPI interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Work is what runs once per message key: it returns the result to store
// and optionally writes to commit with the record's completion (see
// oncely.Work), or an error marked with oncely.Transient, oncely.Permanent
// and friends (an unmarked error is judged by the engine's rules).
type Work[E any] func(ctx context.Context, event E) (result []byte, effects oncely.Effects, err error)

// Handler processes SQS batches of events of type E. It is safe for
// concurrent use.
type Handler[E any] struct {
	engine     *oncely.Engine
	ie         *idem.Engine
	decode     Decoder[E]
	work       Work[E]
	o          Options
	visibility sqsvisibility.Changer
	policy     sqsvisibility.Policy
}

// New returns a Handler that decodes each message with d and runs work at
// most once per key, or an error naming what is missing.
func New[E any](e *oncely.Engine, d Decoder[E], work Work[E], o Options) (*Handler[E], error) {
	ie := engineref.Idem(e)
	switch {
	case ie == nil:
		return nil, errors.New("sqsbatch: an engine is required")
	case d == nil:
		return nil, errors.New("sqsbatch: a decoder is required")
	case work == nil:
		return nil, errors.New("sqsbatch: a function is required")
	}
	if o.Poison == nil {
		p, ok := ie.Store().(driver.PoisonRecorder)
		if !ok {
			return nil, fmt.Errorf("sqsbatch: Options.Poison is required: the engine's store (%T) does not record poison notes", ie.Store())
		}
		o.Poison = p
	}
	if o.MaxConcurrency <= 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	h := &Handler[E]{engine: e, ie: ie, decode: d, work: work, o: o}
	if o.Backoff != nil {
		if o.Backoff.SQS == nil {
			return nil, errors.New("sqsbatch: Options.Backoff.SQS is required: the SQS client that changes the visibility")
		}
		h.visibility = sqsvisibility.New(o.Backoff.SQS)
		h.policy = sqsvisibility.Policy{Base: o.Backoff.Base, Max: o.Backoff.Max}
	}
	return h, nil
}

// Wrap returns fn as an SQS-triggered Lambda handler (for lambda.Start):
// each message is decoded by d and runs fn at most once for its key.
// Nothing of fn's is stored but its success or its permanent failure; use
// [New] to store a result or commit effects with the record. Wrap panics
// where New returns an error (a wiring mistake, found at init).
func Wrap[E any](e *oncely.Engine, d Decoder[E], fn func(context.Context, E) error, o Options) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	if fn == nil {
		panic("sqsbatch: a function is required")
	}
	h, err := New(e, d, func(ctx context.Context, ev E) ([]byte, oncely.Effects, error) {
		return nil, nil, fn(ctx, ev)
	}, o)
	if err != nil {
		panic(err.Error())
	}
	return h.Lambda
}

// Result says what happened to one message.
type Result struct {
	MessageID string
	// Key is the message's key, once the decoder gave one.
	Key string
	// Label says what happened, in one word (see driver.Label): executed,
	// replayed, permanent, retry_exhausted or poison are acknowledged;
	// the others go back to the queue. Count them as metrics.
	Label driver.Label
	// Code is the failure's or the poison note's code, if any.
	Code oncely.Code
	// Attempts is the record's attempt count.
	Attempts int
	// Duration is the time the message took in this invocation.
	Duration time.Duration
	// Visibility is the visibility timeout requested for a message that
	// goes back (0 if none), and VisibilityErr why the change failed.
	Visibility    time.Duration
	VisibilityErr error

	// Why and for how long it goes back to the queue.
	retry      sqsvisibility.Reason
	retryAfter time.Duration
}

// Ack reports whether the message is acknowledged (deleted from the
// queue): only when a record says what happened to it.
func (r Result) Ack() bool { return r.Label.Acknowledged() }

// Lambda handles a batch for lambda.Start: [Handler.Handle] without the
// results.
func (h *Handler[E]) Lambda(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	resp, _, err := h.Handle(ctx, ev)
	return resp, err
}

// Handle processes a batch and returns the messages SQS must deliver
// again, and what happened to each message, in the batch's order. An error
// is returned only when the batch cannot be answered message by message (a
// record without a messageId): SQS then delivers the whole batch again.
func (h *Handler[E]) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, []Result, error) {
	start := h.ie.Now()
	for i, m := range ev.Records {
		if m.MessageId == "" {
			// An empty itemIdentifier would fail the whole batch anyway; say so.
			return events.SQSEventResponse{}, nil, fmt.Errorf("sqsbatch: record %d has no messageId; failing the whole batch", i)
		}
	}
	results := make([]Result, len(ev.Records))
	b := &batch[E]{h: h, flights: map[string]*keyFlight{}}
	if isFIFO(ev) {
		h.runFIFO(ctx, b, ev.Records, results)
	} else {
		h.runStandard(ctx, b, ev.Records, results)
	}
	h.changeVisibility(ctx, ev.Records, results, isFIFO(ev), h.ie.Now().Sub(start))
	var resp events.SQSEventResponse
	logger := h.ie.Logger()
	for _, r := range results {
		logger.InfoContext(ctx, "record", "messageId", r.MessageID, "key", r.Key, "outcome", string(r.Label), "code", string(r.Code),
			"attempts", r.Attempts, "visibility_s", int(r.Visibility/time.Second), "duration_ms", float64(r.Duration.Microseconds())/1000)
		if !r.Ack() {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageID})
		}
	}
	return resp, results, nil
}

func (h *Handler[E]) runStandard(ctx context.Context, b *batch[E], records []events.SQSMessage, results []Result) {
	sem := make(chan struct{}, h.o.MaxConcurrency)
	var wg sync.WaitGroup
	for i := range records {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = b.process(ctx, records[i])
		})
	}
	wg.Wait()
}

// runFIFO runs each message group in order, groups in parallel. After a
// group's first failure the rest of the group is reported failed without
// running, so that Lambda holds the group until the failed record succeeds.
func (h *Handler[E]) runFIFO(ctx context.Context, b *batch[E], records []events.SQSMessage, results []Result) {
	sem := make(chan struct{}, h.o.MaxConcurrency)
	var wg sync.WaitGroup
	for _, idx := range groups(records) {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			failed := false
			for _, i := range idx {
				if failed {
					results[i] = Result{MessageID: records[i].MessageId, Label: idem.LabelSkipped, Code: idem.CodeFIFOGroupStopped}
					continue
				}
				results[i] = b.process(ctx, records[i])
				failed = !results[i].Ack()
			}
		})
	}
	wg.Wait()
}

func isFIFO(ev events.SQSEvent) bool {
	return len(ev.Records) > 0 && strings.HasSuffix(ev.Records[0].EventSourceARN, ".fifo")
}

// groups returns record indexes by MessageGroupId, in arrival order.
func groups(records []events.SQSMessage) [][]int {
	var order []string
	by := map[string][]int{}
	for i, m := range records {
		g := m.Attributes["MessageGroupId"]
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], i)
	}
	out := make([][]int, len(order))
	for i, g := range order {
		out[i] = by[g]
	}
	return out
}

// batch is the state of one invocation: the in-batch flights.
type batch[E any] struct {
	h       *Handler[E]
	mu      sync.Mutex
	flights map[string]*keyFlight
}

// keyFlight serialises the records of one key within a batch and shares
// the outcome among identical copies: two copies of one event run once and
// both get that outcome, instead of the second seeing IN_PROGRESS and
// going back to the queue.
type keyFlight struct {
	mu   sync.Mutex
	done map[string]idem.Outcome // by fingerprint
}

func (b *batch[E]) flight(req idem.Request, run func() idem.Outcome) (idem.Outcome, bool) {
	b.mu.Lock()
	kf := b.flights[req.Key]
	if kf == nil {
		kf = &keyFlight{done: map[string]idem.Outcome{}}
		b.flights[req.Key] = kf
	}
	b.mu.Unlock()
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if out, ok := kf.done[req.Fingerprint]; ok {
		return out, true
	}
	out := run()
	kf.done[req.Fingerprint] = out
	return out, false
}

// process handles one record: checks it, runs it through the engine (or
// notes it as poison), and says what happened.
func (b *batch[E]) process(ctx context.Context, m events.SQSMessage) (res Result) {
	h := b.h
	start := h.ie.Now()
	res.MessageID = m.MessageId
	defer func() {
		if r := recover(); r != nil {
			// A bug outside the function (the decoder's, or ours): nothing
			// says what happened, so the message must come back.
			h.ie.Logger().ErrorContext(ctx, "record processing panicked", "messageId", m.MessageId, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = Result{MessageID: m.MessageId, Label: idem.LabelStoreError, Code: idem.CodePanic}
		}
		res.Duration = h.ie.Now().Sub(start)
	}()
	body := bodyBytes(m.Body)
	if len(body) > h.o.MaxBodyBytes {
		return b.poison(ctx, res, body, &idem.Error{Code: idem.CodeTooLarge,
			Message: fmt.Sprintf("the body is %d bytes; the limit is %d (MAX_BODY_BYTES)", len(body), h.o.MaxBodyBytes)})
	}
	req, ev, err := h.decode(m)
	if err != nil {
		return b.poison(ctx, res, body, err)
	}
	res.Key = req.Key
	out, shared := b.flight(idem.Request(req), func() idem.Outcome {
		return engineref.Run(h.engine, ctx, idem.Request(req), func(ctx context.Context) ([]byte, idem.Effects, error) {
			return h.work(ctx, ev)
		})
	})
	res.Attempts = out.Attempts
	label := out.Label()
	if out.Err != nil {
		res.Code = out.Err.Code
		res.retryAfter = out.Err.RetryAfter
		switch {
		case label == idem.LabelPoison:
			// Refused before anything ran (idem's labels say which codes):
			// acknowledged only with a note.
			return b.poison(ctx, res, body, out.Err)
		case out.Err.Code == idem.CodeInProgress:
			res.retry = sqsvisibility.InProgress
		case out.Err.Code == idem.CodeAbandoned || idem.IsSent(out.Err.Err):
			// The receiver may still be acting on the last request: the
			// backoff, never shorter than the engine's pause (RetryAfter).
			res.retry = sqsvisibility.Sent
		case out.Err.Code == idem.CodeTransientFailure && out.Err.RetryAfter > 0:
			res.retry = sqsvisibility.RetryAfter
		}
	}
	if shared && label == idem.LabelExecuted {
		label = idem.LabelReplayed
	}
	res.Label = label
	return res
}

// bodyBytes is a record's body as bytes, without copying it: a 1 MiB body
// copied is 1 MiB allocated per record, a quarter of what the record path
// may allocate. The bytes are the string's own, so nothing on the record
// path may write to them: the size check and the poison note's digest
// only read them, and decoders get the message (its string).
func bodyBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// poison stores a note about a message that cannot be processed as an
// event, then acknowledges it. If the note cannot be stored, the message is
// not acknowledged. The note holds the reason, the key if one was computed,
// a bounded description that never quotes the body, and the body's digest
// and size.
func (b *batch[E]) poison(ctx context.Context, res Result, body []byte, why error) Result {
	h := b.h
	code, detail := idem.CodeInvalidPayload, why.Error()
	if e, ok := errors.AsType[*idem.Error](why); ok {
		code, detail = e.Code, e.Message
	}
	sum := sha256.Sum256(body)
	now := h.ie.Now()
	res.Code = code
	sctx, cancel := h.ie.Budget().StoreContext(ctx)
	defer cancel()
	err := h.o.Poison.RecordPoison(sctx, idem.Poison{
		ID: res.MessageID, Key: res.Key, Reason: code, Detail: idem.Truncate(detail, idem.MaxPoisonDetail),
		BodySHA256: hex.EncodeToString(sum[:]), BodySize: len(body),
		At: now, ExpiresAt: now.Add(h.ie.Retention()),
	})
	if err != nil {
		h.ie.Logger().ErrorContext(ctx, "poison note not stored; the message will be redelivered", "messageId", res.MessageID, "reason", string(code), "error", err.Error(), idem.StoreAttr(err))
		res.Label = idem.LabelStoreError
		if idem.Classify(err) == idem.ClassPermanent {
			res.Label = idem.LabelStoreRefused // a retry will not fix it: counted apart
		}
		return res
	}
	res.Label = idem.LabelPoison
	return res
}

// changeVisibility gives each message going back to the queue its delay,
// in one batched call per queue, within the invocation's time budget. A
// failure is logged and counted; it never changes a record's outcome (the
// message then returns at the queue's own visibility timeout).
func (h *Handler[E]) changeVisibility(ctx context.Context, records []events.SQSMessage, results []Result, fifo bool, elapsed time.Duration) {
	if h.visibility == nil {
		return
	}
	var changes []sqsvisibility.Change
	groupDelay := map[string]time.Duration{}
	for i, r := range results {
		if r.Ack() {
			continue
		}
		m := records[i]
		delay := h.policy.Delay(r.retry, receiveCount(m), r.retryAfter, elapsed, h.ie.Random())
		if fifo {
			// Messages of a group still in flight block the group: every
			// failed record of the group comes back together, at the
			// group's first failure's time, and in order.
			g := m.Attributes["MessageGroupId"]
			if d, ok := groupDelay[g]; ok {
				delay = d
			} else {
				groupDelay[g] = delay
			}
		}
		results[i].Visibility = delay
		changes = append(changes, sqsvisibility.Change{QueueARN: m.EventSourceARN, MessageID: m.MessageId, ReceiptHandle: m.ReceiptHandle, Timeout: delay})
	}
	if len(changes) == 0 {
		return
	}
	cctx, cancel := h.ie.Budget().CallContext(ctx)
	defer cancel()
	failed := h.visibility.ChangeVisibility(cctx, changes)
	for i := range results {
		if err, ok := failed[results[i].MessageID]; ok {
			results[i].VisibilityErr = err
			h.ie.Logger().WarnContext(ctx, "visibility not changed; the message returns at the queue's visibility timeout",
				"messageId", results[i].MessageID, "wanted_s", int(results[i].Visibility/time.Second), "error", err.Error())
		}
	}
}

// receiveCount reads ApproximateReceiveCount; a missing or malformed one
// counts as the first receive.
func receiveCount(m events.SQSMessage) int {
	n, err := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

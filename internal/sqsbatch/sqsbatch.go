// Package sqsbatch processes SQS batches (standard and FIFO) through the
// idempotency engine and reports partial batch failures.
//
// The rule it keeps: no message is acknowledged unless a record says what
// happened to it. A message is acknowledged when its success or permanent
// failure is stored, or when a poison note about it is stored; every other
// message goes in batchItemFailures and SQS delivers it again, after a
// delay this package chooses per message (see package sqsvisibility).
package sqsbatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/keyexpr"
)

// DefaultMaxConcurrency is Options.MaxConcurrency's default.
const DefaultMaxConcurrency = 10

// Options configure a Handler. Engine, Poison, Action and Keys are required.
type Options struct {
	Engine *idem.Engine
	Poison idem.PoisonRecorder
	Action action.Func
	Keys   *keyexpr.Extractor
	// MaxConcurrency bounds the records (standard queue) or message groups
	// (FIFO) processed at once. Zero means DefaultMaxConcurrency.
	MaxConcurrency int
	// MaxBodyBytes refuses larger bodies with a TOO_LARGE poison note.
	// Zero means idem.DefaultMaxEventBytes.
	MaxBodyBytes int
	// Visibility, if set, gives each message that goes back to the queue
	// its own delay (VisibilityPolicy). Nil leaves the queue's timeout.
	Visibility       sqsvisibility.Changer
	VisibilityPolicy sqsvisibility.Policy
	// PoisonRetention is how long poison notes are kept. Zero means
	// idem.DefaultRetention.
	PoisonRetention time.Duration
	// Now is the clock and Random the jitter source. Nil means time.Now
	// and math/rand/v2.
	Now    func() time.Time
	Random func() float64
	Logger *slog.Logger
}

// Handler processes SQS batches. It is safe for concurrent use.
type Handler struct{ o Options }

// New returns a Handler, or an error naming the missing option.
func New(o Options) (*Handler, error) {
	switch {
	case o.Engine == nil:
		return nil, errors.New("sqsbatch: Options.Engine is required")
	case o.Poison == nil:
		return nil, errors.New("sqsbatch: Options.Poison is required")
	case o.Action == nil:
		return nil, errors.New("sqsbatch: Options.Action is required")
	case o.Keys == nil:
		return nil, errors.New("sqsbatch: Options.Keys is required")
	}
	if o.MaxConcurrency <= 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = idem.DefaultMaxEventBytes
	}
	if o.PoisonRetention <= 0 {
		o.PoisonRetention = idem.DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Random == nil {
		o.Random = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Handler{o: o}, nil
}

// Result says what happened to one message.
type Result struct {
	MessageID string
	Key       string
	Label     idem.Label
	Code      idem.Code // the failure or poison code, if any
	Attempts  int
	Duration  time.Duration
	// Why and for how long it goes back to the queue; set for messages in
	// batchItemFailures when visibility changes are on.
	retry      sqsvisibility.Reason
	retryAfter time.Duration
	Visibility time.Duration // the visibility timeout requested, 0 if none
	// VisibilityErr is why the visibility change failed, if it did.
	VisibilityErr error
}

// Ack reports whether the message is acknowledged (deleted from the queue).
func (r Result) Ack() bool { return r.Label.Acknowledged() }

// Handle processes a batch and returns the messages SQS must deliver again.
// An error is returned only when the batch cannot be answered record by
// record (a record without a messageId): SQS then retries the whole batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, []Result, error) {
	start := h.o.Now()
	for i, m := range ev.Records {
		if m.MessageId == "" {
			// An empty itemIdentifier would fail the whole batch anyway; say so.
			return events.SQSEventResponse{}, nil, fmt.Errorf("sqsbatch: record %d has no messageId; failing the whole batch", i)
		}
	}
	results := make([]Result, len(ev.Records))
	b := &batch{h: h, flights: map[string]*keyFlight{}}
	if isFIFO(ev) {
		h.runFIFO(ctx, b, ev.Records, results)
	} else {
		h.runStandard(ctx, b, ev.Records, results)
	}
	h.changeVisibility(ctx, ev.Records, results, isFIFO(ev), h.o.Now().Sub(start))
	var resp events.SQSEventResponse
	for _, r := range results {
		h.o.Logger.InfoContext(ctx, "record", "messageId", r.MessageID, "key", r.Key, "outcome", string(r.Label), "code", string(r.Code),
			"attempts", r.Attempts, "visibility_s", int(r.Visibility/time.Second), "duration_ms", float64(r.Duration.Microseconds())/1000)
		if !r.Ack() {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageID})
		}
	}
	return resp, results, nil
}

func (h *Handler) runStandard(ctx context.Context, b *batch, records []events.SQSMessage, results []Result) {
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
func (h *Handler) runFIFO(ctx context.Context, b *batch, records []events.SQSMessage, results []Result) {
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
type batch struct {
	h       *Handler
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

func (b *batch) flight(req idem.Request, run func() idem.Outcome) (idem.Outcome, bool) {
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
func (b *batch) process(ctx context.Context, m events.SQSMessage) (res Result) {
	h := b.h
	start := h.o.Now()
	res.MessageID = m.MessageId
	defer func() {
		if r := recover(); r != nil {
			// A bug outside the action: nothing says what happened, so the
			// message must come back.
			h.o.Logger.ErrorContext(ctx, "record processing panicked", "messageId", m.MessageId, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = Result{MessageID: m.MessageId, Label: idem.LabelStoreError, Code: idem.CodePanic}
		}
		res.Duration = h.o.Now().Sub(start)
	}()
	body := bodyBytes(m.Body)
	if len(body) > h.o.MaxBodyBytes {
		return b.poison(ctx, res, body, &idem.Error{Code: idem.CodeTooLarge,
			Message: fmt.Sprintf("the body is %d bytes; the limit is %d (MAX_BODY_BYTES)", len(body), h.o.MaxBodyBytes)})
	}
	req, ev, err := h.event(body, m)
	if err != nil {
		return b.poison(ctx, res, body, err)
	}
	res.Key = req.Key
	out, shared := b.run(ctx, req, ev)
	res.Attempts = out.Attempts
	res.Label = out.Label()
	if out.Err != nil {
		res.Code = out.Err.Code
		res.retryAfter = out.Err.RetryAfter
		switch {
		case res.Label == idem.LabelPoison:
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
	if shared && res.Label == idem.LabelExecuted {
		res.Label = idem.LabelReplayed
	}
	return res
}

// bodyBytes is a record's body as bytes, without copying it: a 1 MiB body
// copied is 1 MiB allocated per record, a quarter of what the record path
// may allocate (TestWorstCaseBodiesAllocateLittleThroughTheAdapter). The
// bytes are the string's own, so nothing on the record path may write to
// them: the fingerprint, the key's decode, the envelope's decode and the
// poison note's digest only read them, and the action gets its own copy.
func bodyBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// event returns a record's request and the event its action gets. An
// inbound webhook's envelope (package inbound) has its own key and
// fingerprint, wh:<source>:<delivery-id> and the sender's stable fields,
// whatever the configured expressions say, and the action gets the
// sender's body; every other body goes through the expressions.
func (h *Handler) event(body []byte, m events.SQSMessage) (idem.Request, action.Event, error) {
	if inbound.IsEnvelope(body) {
		env, err := inbound.DecodeEnvelope(body)
		if err != nil {
			return idem.Request{}, action.Event{}, err
		}
		req, err := env.Request()
		if err != nil {
			return idem.Request{}, action.Event{}, err
		}
		return req, action.Event{Key: req.Key, Body: env.Body, Source: action.SourceWebhook, ID: m.MessageId,
			Inbound: &action.Inbound{Source: env.Source, Scheme: string(env.Scheme), DeliveryID: env.DeliveryID}}, nil
	}
	req, err := h.o.Keys.Request(body)
	if err != nil {
		return idem.Request{}, action.Event{}, err
	}
	return idem.Request(req), action.Event{Key: req.Key, Body: json.RawMessage(m.Body), Source: "sqs", ID: m.MessageId}, nil
}

// run runs the record through the engine, sharing the outcome with
// identical copies in the batch.
func (b *batch) run(ctx context.Context, req idem.Request, ev action.Event) (idem.Outcome, bool) {
	return b.flight(req, func() idem.Outcome {
		return b.h.o.Engine.DoWork(ctx, req, action.Work(b.h.o.Action, ev))
	})
}

// poison stores a note about a message that cannot be processed as an
// event, then acknowledges it. If the note cannot be stored, the message is
// not acknowledged. The note holds the reason, the key if one was computed,
// a bounded description that never quotes the body, and the body's digest
// and size.
func (b *batch) poison(ctx context.Context, res Result, body []byte, why error) Result {
	h := b.h
	code, detail := idem.CodeInvalidPayload, why.Error()
	var e *idem.Error
	if errors.As(why, &e) {
		code, detail = e.Code, e.Message
	}
	sum := sha256.Sum256(body)
	now := h.o.Now()
	res.Code = code
	sctx, cancel := h.o.Engine.Budget().StoreContext(ctx)
	defer cancel()
	err := h.o.Poison.RecordPoison(sctx, idem.Poison{
		ID: res.MessageID, Key: res.Key, Reason: code, Detail: idem.Truncate(detail, idem.MaxPoisonDetail),
		BodySHA256: hex.EncodeToString(sum[:]), BodySize: len(body),
		At: now, ExpiresAt: now.Add(h.o.PoisonRetention),
	})
	if err != nil {
		h.o.Logger.ErrorContext(ctx, "poison note not stored; the message will be redelivered", "messageId", res.MessageID, "reason", string(code), "error", err.Error(), idem.StoreAttr(err))
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
func (h *Handler) changeVisibility(ctx context.Context, records []events.SQSMessage, results []Result, fifo bool, elapsed time.Duration) {
	if h.o.Visibility == nil {
		return
	}
	var changes []sqsvisibility.Change
	groupDelay := map[string]time.Duration{}
	for i, r := range results {
		if r.Ack() {
			continue
		}
		m := records[i]
		delay := h.o.VisibilityPolicy.Delay(r.retry, receiveCount(m), r.retryAfter, elapsed, h.o.Random())
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
	cctx, cancel := h.o.Engine.Budget().CallContext(ctx)
	defer cancel()
	failed := h.o.Visibility.ChangeVisibility(cctx, changes)
	for i := range results {
		if err, ok := failed[results[i].MessageID]; ok {
			results[i].VisibilityErr = err
			h.o.Logger.WarnContext(ctx, "visibility not changed; the message returns at the queue's visibility timeout",
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

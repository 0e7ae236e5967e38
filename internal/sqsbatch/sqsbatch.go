// Package sqsbatch processes SQS batches (standard and FIFO) through the
// idempotency engine and reports partial batch failures.
//
// The rule it keeps: no message is acknowledged unless a record says what
// happened to it. A message is acknowledged when its success or permanent
// failure is stored, or when a poison note about it is stored; every other
// message goes in batchItemFailures and SQS delivers it again.
package sqsbatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	jmespath "github.com/jmespath-community/go-jmespath"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/emf"
	"github.com/oncely/oncely/internal/idem"
)

// DefaultKeyExpression builds the key from the event's id and action. A
// missing id or action is an error, never "null": a key made of nulls
// would make every keyless event share one record.
const DefaultKeyExpression = "join(':', ['evt', id, action])"

// Poison reasons.
const (
	ReasonNotJSON    idem.Code = "NOT_JSON"
	ReasonKeyMissing idem.Code = "KEY_MISSING"
)

// Options configure a Handler. Engine, Poison and Action are required.
type Options struct {
	Engine *idem.Engine
	Poison idem.PoisonRecorder
	Action action.Func
	// KeyExpression is a JMESPath expression over the message body that
	// yields the key. Empty means DefaultKeyExpression.
	KeyExpression string
	// PayloadExpression, if set, selects the part of the body the
	// fingerprint covers. Empty means the whole body.
	PayloadExpression string
	// MaxConcurrency bounds the records (standard queue) or message groups
	// (FIFO) processed at once. Zero means 10.
	MaxConcurrency int
	// MinRemaining is the least invocation time a record needs to start:
	// with less left, it is reported failed without running. Zero means 2s.
	MinRemaining time.Duration
	// PoisonRetention is how long poison notes are kept. Zero means 24h.
	PoisonRetention time.Duration
	// Now is the clock. Nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

// Handler processes SQS batches. It is safe for concurrent use.
type Handler struct {
	o          Options
	keyExpr    jmespath.JMESPath
	payloadExp jmespath.JMESPath
}

// New compiles the expressions and returns a Handler, or an error naming
// the bad option.
func New(o Options) (*Handler, error) {
	switch {
	case o.Engine == nil:
		return nil, errors.New("sqsbatch: Options.Engine is required")
	case o.Poison == nil:
		return nil, errors.New("sqsbatch: Options.Poison is required")
	case o.Action == nil:
		return nil, errors.New("sqsbatch: Options.Action is required")
	}
	if o.KeyExpression == "" {
		o.KeyExpression = DefaultKeyExpression
	}
	h := &Handler{o: o}
	var err error
	if h.keyExpr, h.payloadExp, err = compile(o.KeyExpression, o.PayloadExpression); err != nil {
		return nil, err
	}
	if h.o.MaxConcurrency <= 0 {
		h.o.MaxConcurrency = 10
	}
	if h.o.MinRemaining <= 0 {
		h.o.MinRemaining = 2 * time.Second
	}
	if h.o.PoisonRetention <= 0 {
		h.o.PoisonRetention = idem.DefaultRetention
	}
	if h.o.Now == nil {
		h.o.Now = time.Now
	}
	if h.o.Logger == nil {
		h.o.Logger = slog.Default()
	}
	return h, nil
}

// CompileExpressions reports whether the key and payload expressions
// compile (an empty key expression means the default).
func CompileExpressions(key, payload string) error {
	if key == "" {
		key = DefaultKeyExpression
	}
	_, _, err := compile(key, payload)
	return err
}

func compile(key, payload string) (keyExpr, payloadExpr jmespath.JMESPath, err error) {
	if keyExpr, err = jmespath.Compile(key); err != nil {
		return nil, nil, fmt.Errorf("key expression %q: %w", key, err)
	}
	if payload != "" {
		if payloadExpr, err = jmespath.Compile(payload); err != nil {
			return nil, nil, fmt.Errorf("payload expression %q: %w", payload, err)
		}
	}
	return keyExpr, payloadExpr, nil
}

// Result says what happened to one message.
type Result struct {
	MessageID string
	Key       string
	Outcome   string // an emf label
	Ack       bool
	Attempts  int
	Code      idem.Code // the failure or poison code, if any
	Duration  time.Duration
}

// Handle processes a batch and returns the messages SQS must deliver again.
// An error is returned only when the batch cannot be answered record by
// record (a record without a messageId): SQS then retries the whole batch.
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, []Result, error) {
	for i, m := range ev.Records {
		if m.MessageId == "" {
			// An empty itemIdentifier would fail the whole batch anyway; say so.
			return events.SQSEventResponse{}, nil, fmt.Errorf("sqsbatch: record %d has no messageId; failing the whole batch", i)
		}
	}
	results := make([]Result, len(ev.Records))
	b := &batch{h: h, flights: map[string]*keyFlight{}}
	sem := make(chan struct{}, h.o.MaxConcurrency)
	var wg sync.WaitGroup
	if isFIFO(ev) {
		for _, idx := range groups(ev.Records) {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				// In order within a group; after the first failure, the rest
				// of the group is reported failed without running, so that
				// Lambda holds the group until the failed record succeeds.
				failed := false
				for _, i := range idx {
					if failed {
						results[i] = Result{MessageID: ev.Records[i].MessageId, Outcome: emf.Skipped, Code: "FIFO_GROUP_STOPPED"}
						continue
					}
					results[i] = b.process(ctx, ev.Records[i])
					failed = !results[i].Ack
				}
			})
		}
	} else {
		for i := range ev.Records {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				results[i] = b.process(ctx, ev.Records[i])
			})
		}
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for _, r := range results {
		h.o.Logger.InfoContext(ctx, "record", "messageId", r.MessageID, "key", r.Key, "outcome", r.Outcome, "code", string(r.Code),
			"attempts", r.Attempts, "duration_ms", float64(r.Duration.Microseconds())/1000)
		if !r.Ack {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageID})
		}
	}
	return resp, results, nil
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

func (b *batch) process(ctx context.Context, m events.SQSMessage) (res Result) {
	h := b.h
	start := h.o.Now()
	res.MessageID = m.MessageId
	defer func() {
		if r := recover(); r != nil {
			// A bug outside the action: nothing says what happened, so the
			// message must come back.
			h.o.Logger.ErrorContext(ctx, "record processing panicked", "messageId", m.MessageId, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res = Result{MessageID: m.MessageId, Outcome: emf.StoreError, Code: idem.CodePanic}
		}
		res.Duration = h.o.Now().Sub(start)
	}()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(start) < h.o.MinRemaining {
		res.Outcome, res.Code = emf.Skipped, idem.CodeDeadline
		return res
	}
	body := []byte(m.Body)
	doc, err := decode(body)
	if err != nil {
		return b.poison(ctx, res, body, ReasonNotJSON, err.Error())
	}
	v, err := h.keyExpr.Search(doc)
	key, ok := v.(string)
	if err != nil || !ok || key == "" {
		detail := fmt.Sprintf("key expression %q gave %v", h.o.KeyExpression, v)
		if err != nil {
			detail = fmt.Sprintf("key expression %q: %v", h.o.KeyExpression, err)
		}
		return b.poison(ctx, res, body, ReasonKeyMissing, detail)
	}
	res.Key = key
	if emptyPart(key) {
		// A field that was present but empty ("id": "") must not yield a key
		// that every such event shares.
		return b.poison(ctx, res, body, ReasonKeyMissing, fmt.Sprintf("key %q has an empty part", key))
	}
	if err := idem.ValidateKey(key); err != nil {
		return b.poison(ctx, res, body, idem.CodeInvalidKey, err.Error())
	}
	payload := body
	if h.payloadExp != nil {
		// The whole body must be canonical JSON even when only a part is
		// fingerprinted: the decoder above forgives duplicate names and
		// invalid text, which would let two different bodies collide.
		if _, err := idem.Fingerprint(body); err != nil {
			return b.poison(ctx, res, body, idem.CodeInvalidPayload, err.Error())
		}
		sel, err := h.payloadExp.Search(doc)
		if err != nil {
			return b.poison(ctx, res, body, idem.CodeInvalidPayload, err.Error())
		}
		payload, _ = json.Marshal(sel) // values decoded from JSON always marshal
	}
	fp, err := idem.Fingerprint(payload)
	if err != nil {
		return b.poison(ctx, res, body, idem.CodeInvalidPayload, err.Error())
	}
	req := idem.Request{Key: key, Fingerprint: fp}
	ev := action.Event{Key: key, Body: json.RawMessage(body), Source: "sqs", ID: m.MessageId}
	out, shared := b.flight(req, func() idem.Outcome {
		out, _ := h.o.Engine.Do(ctx, req, func(ctx context.Context) ([]byte, error) {
			r, err := h.o.Action(ctx, ev)
			if err != nil {
				return nil, err
			}
			return action.Encode(r), nil
		})
		return out
	})
	res.Attempts = out.Attempts
	if out.Err != nil {
		res.Code = out.Err.Code
	}
	switch {
	case out.Err == nil && (out.Replayed || shared):
		res.Outcome, res.Ack = emf.Replayed, true
	case out.Err == nil:
		res.Outcome, res.Ack = emf.Executed, true
	case out.Stored:
		res.Outcome, res.Ack = emf.Permanent, true
	case out.Err.Code == idem.CodeKeyReused:
		return b.poison(ctx, res, body, idem.CodeKeyReused, out.Err.Message)
	default:
		res.Outcome = Label(out.Err.Code)
	}
	return res
}

// emptyPart reports whether a ':'-separated key has an empty part.
func emptyPart(key string) bool {
	return strings.HasPrefix(key, ":") || strings.HasSuffix(key, ":") || strings.Contains(key, "::")
}

// Label maps an unstored failure's code to its outcome label.
func Label(code idem.Code) string {
	switch code {
	case idem.CodeInProgress:
		return emf.InProgress
	case idem.CodeLeaseLost:
		return emf.LeaseLost
	case idem.CodeStoreUnavailable, idem.CodeStoreMisconfigured:
		return emf.StoreError
	case idem.CodeDeadline:
		return emf.Skipped
	default:
		return emf.Transient
	}
}

// poison stores a note about a message that cannot be processed as an
// event, then acknowledges it. If the note cannot be stored, the message
// is not acknowledged.
func (b *batch) poison(ctx context.Context, res Result, body []byte, reason idem.Code, detail string) Result {
	h := b.h
	sum := sha256.Sum256(body)
	now := h.o.Now()
	res.Code = reason
	err := h.o.Poison.RecordPoison(ctx, idem.Poison{
		ID: res.MessageID, Reason: reason, Detail: detail, BodySHA256: hex.EncodeToString(sum[:]),
		At: now, ExpiresAt: now.Add(h.o.PoisonRetention),
	})
	if err != nil {
		h.o.Logger.ErrorContext(ctx, "poison note not stored; the message will be redelivered", "messageId", res.MessageID, "reason", string(reason), "error", err.Error())
		res.Outcome = emf.StoreError
		return res
	}
	res.Outcome, res.Ack = emf.Poison, true
	return res
}

// decode parses the body keeping numbers exact (json.Number), so that
// large ids survive key and payload expressions.
func decode(body []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	if d.More() {
		return nil, errors.New("body is not JSON: data after the first value")
	}
	return v, nil
}

// Package router is the Lambda entry point: it tells an SQS batch from an
// API Gateway HTTP API request, hands it to its adapter, and writes one EMF
// metrics document per invocation.
package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/emf"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/secretsource"
)

// MetricsNamespace is the CloudWatch namespace of the EMF metrics.
const MetricsNamespace = "oncely"

// The Source dimension's values: the template's alarms name them, so they
// are the one list (a test checks the alarms against it). SourceWebhook is
// the receiving route POST /webhooks/{source}: its deliveries are counted
// apart from POST /events requests, by their own outcomes.
const (
	SourceSQS     = "sqs"
	SourceHTTP    = "http"
	SourceWebhook = "webhook"
)

// Sources lists the Source dimension's values.
var Sources = []string{SourceSQS, SourceHTTP, SourceWebhook}

// MetricVisibilityFailed counts SQS visibility changes that failed (the
// message then returns at the queue's own visibility timeout).
const MetricVisibilityFailed = "visibility_change_failed"

// The signing secret's problems that did not stop deliveries (see package
// secretsource): a pending or previous version that is not a valid key
// was ignored; a re-read failed and the keys read before stayed in use.
// MetricSecretRefreshFailed also counts, in the webhook documents, the
// inbound sources secret's failed re-reads.
const (
	MetricSigningKeyIgnored   = "signing_key_ignored"
	MetricSecretRefreshFailed = "secret_refresh_failed"
)

// MetricEnvelopeUnproved counts the inbound envelopes the queue path
// refused as not proved to come from the receiving route (the
// ENVELOPE_UNPROVED poison notes, also counted as poison): a queue
// producer forged one, or one was changed on the queue. A template alarm
// fires on any. It is written in an SQS document only when it is not zero:
// every other document stays as it was before proofs existed, and an alarm
// on it treats a missing value as none.
const MetricEnvelopeUnproved = "envelope_unproved"

// Metrics are the count metrics of the SQS and HTTP documents: one per
// label, MetricVisibilityFailed and the signing secret's two.
func Metrics() []string {
	names := make([]string, 0, len(driver.Labels)+3)
	for _, l := range driver.Labels {
		names = append(names, string(l))
	}
	return append(names, MetricVisibilityFailed, MetricSigningKeyIgnored, MetricSecretRefreshFailed)
}

// SecretHealth reports a secret's problems since the last call (a
// *secretsource.Source, or a *secretsource.Document).
type SecretHealth interface {
	TakeCounts() secretsource.Counts
}

// WebhookMetrics are the count metrics of the webhook documents: one per
// outcome of the receiving route, and MetricSecretRefreshFailed (the
// inbound sources secret's).
func WebhookMetrics() []string {
	names := make([]string, 0, len(receiving.WebhookOutcomes)+1)
	for _, o := range receiving.WebhookOutcomes {
		names = append(names, string(o))
	}
	return append(names, MetricSecretRefreshFailed)
}

// MetricsFor returns the count metrics a document with this Source holds
// (nil for a value the function never writes).
func MetricsFor(source string) []string {
	switch source {
	case SourceSQS:
		return append(Metrics(), MetricEnvelopeUnproved)
	case SourceHTTP:
		return Metrics()
	case SourceWebhook:
		return WebhookMetrics()
	}
	return nil
}

// metricNames and webhookMetricNames are built once: every invocation
// writes one of them.
var (
	metricNames        = Metrics()
	webhookMetricNames = WebhookMetrics()
)

// Router dispatches invocations. It is safe for concurrent use (Lambda
// Managed Instances run several invocations at once in one process): its
// fields are set once, before the first invocation; each invocation's
// counts are its own.
type Router struct {
	SQS  *queue.Handler
	HTTP *eventsapi.Handler // POST /events
	// Receiving, if set, serves the receiving route POST
	// /webhooks/{source}; nil leaves it off (404, like any other route).
	Receiving *receiving.Handler
	Function  string // the FunctionName dimension
	// Metrics receives the EMF documents (stdout in Lambda), each in one
	// Write: with concurrent invocations it must keep concurrent Writes
	// whole, as an *os.File does. Nil writes none.
	Metrics io.Writer
	Logger  *slog.Logger
	Now     func() time.Time
	// FirstInvoke, if set, runs once per container, at the first
	// invocation, with the time that invocation has: the function's
	// timeout, which Lambda does not show at init. The wiring checks its
	// configuration against it. Invocations that start meanwhile wait for
	// it: it must be quick.
	FirstInvoke func(ctx context.Context, timeout time.Duration)
	// Secret, if set, is the signing secret, whose problems each SQS and
	// HTTP document counts (including those of the read at init, in the
	// first document).
	Secret SecretHealth
	// ProofSecret, if set, is the inbound envelope proof's secret, which
	// both functions read: its problems are counted with the other
	// secret's in every document (signing_key_ignored where the document
	// lists it, secret_refresh_failed in all).
	ProofSecret SecretHealth
	// InboundSecret, if set, is the inbound webhook sources' secret, whose
	// failed re-reads each webhook document counts.
	InboundSecret SecretHealth

	once sync.Once
}

// invocation is an event decoded in one pass: an SQS batch whole (each
// body is decoded from it once, and again only by the key expression), or
// an API Gateway HTTP API request whole. Their members do not overlap, so
// one decode fills the one the payload is.
type invocation struct {
	Records []events.SQSMessage `json:"Records"`
	events.APIGatewayV2HTTPRequest
}

// sqs reports whether the invocation is an SQS batch.
func (in *invocation) sqs() bool {
	return len(in.Records) > 0 && in.Records[0].EventSource == "aws:sqs"
}

// shape is what routing needs of an event. Only a payload the one decode
// refused is decoded into it, to explain the refusal in the words the
// function always used (a decode error names the Go type that refused a
// member, so the invocation's type would word it differently).
type shape struct {
	Records        []events.SQSMessage `json:"Records"`
	RequestContext struct {
		HTTP struct {
			Method string `json:"method"`
		} `json:"http"`
	} `json:"requestContext"`
}

// Invoke handles one invocation. Its result is an events.SQSEventResponse
// or an events.APIGatewayV2HTTPResponse. An error fails the invocation
// (for SQS: the whole batch comes back), so it is kept for what cannot be
// answered record by record.
func (r *Router) Invoke(ctx context.Context, payload json.RawMessage) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.logger().ErrorContext(ctx, "invocation panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("internal error: %v", p)
		}
	}()
	start := r.now()
	r.firstInvoke(ctx, start)
	in, err := decode(payload)
	if err != nil {
		return nil, err
	}
	var counts emf.Counts
	source := SourceSQS
	if in.sqs() {
		if result, err = r.handleSQS(ctx, in.Records, &counts); err != nil {
			return nil, err
		}
	} else {
		source, result = r.handleHTTP(ctx, in.APIGatewayV2HTTPRequest, &counts)
	}
	r.writeMetrics(ctx, source, &counts, start)
	return result, nil
}

// now reads the router's clock.
func (r *Router) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// firstInvoke runs FirstInvoke at the container's first invocation, with
// the time it has from start.
func (r *Router) firstInvoke(ctx context.Context, start time.Time) {
	if r.FirstInvoke == nil {
		return
	}
	r.once.Do(func() {
		if d, ok := ctx.Deadline(); ok {
			r.FirstInvoke(ctx, d.Sub(start).Round(time.Second))
		}
	})
}

// handleSQS hands a batch to the SQS adapter and counts each record's label
// and failed visibility change.
func (r *Router) handleSQS(ctx context.Context, records []events.SQSMessage, counts *emf.Counts) (any, error) {
	resp, results, err := r.SQS.Handle(ctx, events.SQSEvent{Records: records})
	if err != nil {
		return nil, err
	}
	for _, res := range results {
		counts.Add(string(res.Label))
		if queue.Unproved(res) {
			counts.Add(MetricEnvelopeUnproved)
		}
		if res.VisibilityErr != nil {
			counts.Add(MetricVisibilityFailed)
		}
	}
	return resp, nil
}

// handleHTTP hands a request to the HTTP adapter and counts its label, or
// its webhook outcome; the source says which route answered.
func (r *Router) handleHTTP(ctx context.Context, req events.APIGatewayV2HTTPRequest, counts *emf.Counts) (string, any) {
	if r.Receiving != nil {
		if _, _, ok := receiving.Route(req); ok {
			resp, res := r.Receiving.Handle(ctx, req)
			counts.Add(string(res.Outcome))
			return SourceWebhook, resp
		}
	}
	resp, res := r.HTTP.Handle(ctx, req)
	counts.Add(string(res.Label))
	return SourceHTTP, resp
}

// writeMetrics writes the invocation's EMF document, when Metrics is set,
// adding the counts of the secret the source's alarms watch.
func (r *Router) writeMetrics(ctx context.Context, source string, counts *emf.Counts, start time.Time) {
	if r.Metrics == nil {
		return
	}
	names := metricNames
	secret := r.Secret
	if source == SourceWebhook {
		// The receiving route signs nothing: the signing secret's
		// counts wait for the next SQS or HTTP document, whose alarms
		// watch them; this one counts the sources secret's.
		names, secret = webhookMetricNames, r.InboundSecret
	}
	if counts.Get(MetricEnvelopeUnproved) > 0 {
		names = append(slices.Clone(names), MetricEnvelopeUnproved)
	}
	for _, secret := range []SecretHealth{secret, r.ProofSecret} {
		if secret != nil {
			c := secret.TakeCounts()
			counts.AddN(MetricSigningKeyIgnored, c.Ignored)
			counts.AddN(MetricSecretRefreshFailed, c.RefreshFailed)
		}
	}
	doc := emf.Document{
		Namespace: MetricsNamespace, Dimensions: map[string]string{"FunctionName": r.Function, "Source": source},
		Names: names, Counts: counts, Duration: r.now().Sub(start), At: r.now(),
	}
	if err := emf.Write(r.Metrics, doc); err != nil {
		r.logger().WarnContext(ctx, "metrics not written", "error", err.Error())
	}
}

// decode decodes the payload, in one pass, into an invocation the router
// can route (an SQS batch or an API request), or returns an error that
// says what the function accepts and what it got.
func decode(payload []byte) (invocation, error) {
	var in invocation
	if t := bytes.TrimSpace(payload); len(t) == 0 || t[0] != '{' {
		if !json.Valid(payload) {
			return in, notJSON(payload)
		}
		return in, fmt.Errorf("unsupported event: want an SQS event or an API Gateway HTTP API payload 2.0 request, both JSON objects; got %s", describe(payload))
	}
	// One pass on the hot path: a syntax error is found by this decode too.
	if err := json.Unmarshal(payload, &in); err != nil {
		if _, ok := errors.AsType[*json.SyntaxError](err); ok {
			return in, notJSON(payload)
		}
		return refused(payload)
	}
	if !in.sqs() && in.RequestContext.HTTP.Method == "" {
		return in, unsupported(payload)
	}
	return in, nil
}

// refused routes a JSON object the invocation's decode refused (a member of
// an unexpected type) as the function did before decoding in one pass: by
// what it needs to route, then the API request whole; it errs only where
// that did, with the same words.
func refused(payload []byte) (invocation, error) {
	var s shape
	if err := json.Unmarshal(payload, &s); err != nil {
		// An object whose Records or requestContext has another shape.
		return invocation{}, fmt.Errorf("unsupported event: want an SQS event or an API Gateway HTTP API payload 2.0 request; got %s (%v)", describe(payload), err)
	}
	if in := (invocation{Records: s.Records}); in.sqs() {
		return in, nil
	}
	if s.RequestContext.HTTP.Method == "" {
		return invocation{}, unsupported(payload)
	}
	var in invocation
	if err := json.Unmarshal(payload, &in.APIGatewayV2HTTPRequest); err != nil {
		return invocation{}, fmt.Errorf("API Gateway v2 event: %w", err)
	}
	return in, nil
}

func notJSON(payload []byte) error {
	return fmt.Errorf("the event is not JSON (%d bytes): want an SQS event or an API Gateway HTTP API payload 2.0 request", len(payload))
}

func unsupported(payload []byte) error {
	return fmt.Errorf("unsupported event: want an SQS event (an object with Records from aws:sqs) or an API Gateway HTTP API payload 2.0 request (an object with requestContext.http); got %s", describe(payload))
}

// describe names a JSON payload's type and, for an object, its top-level
// member names (not their values).
func describe(payload []byte) string {
	var v any
	if err := json.Unmarshal(payload, &v); err != nil {
		return "something that is not JSON"
	}
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "a JSON string"
	case bool:
		return "a JSON boolean"
	case float64:
		return "a JSON number"
	case []any:
		return fmt.Sprintf("a JSON array of %d elements", len(v))
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) > 8 {
			keys = append(keys[:8], "…")
		}
		return fmt.Sprintf("an object with members [%s]", strings.Join(keys, ", "))
	}
	return fmt.Sprintf("%T", v)
}

func (r *Router) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

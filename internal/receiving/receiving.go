// Package receiving is the ready function's receiving route, POST
// /webhooks/{source}: a signed delivery from another service (Standard
// Webhooks, Stripe, GitHub) is verified, put on the events queue in an
// envelope, and answered 202. It makes no store call at all: the queue
// path runs the delivery once, under its own key.
package receiving

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/problem"
)

// The receiving route: senders POST their deliveries to
// /webhooks/<source name>.
const (
	Method               = "POST"
	WebhookRouteKey      = Method + " /webhooks/{source}"
	WebhookPathPrefix    = "/webhooks/"
	WebhookPathParameter = "source"
)

// Options configure the receiving route POST /webhooks/{source}. Senders
// cannot sign with SigV4, so the route has no API Gateway authorizer: the
// handler verifies the sender's signature before anything else is done
// with the delivery, and makes no store call at all. Sources, Queue,
// Proof, MaxMessageBytes and Engine are required.
type Options struct {
	// Sources returns the configured senders (a secretsource.Document of
	// inbound.ParseSources in the function).
	Sources SourceSet
	// Queue queues an envelope on the standard events queue.
	Queue Queue
	// Proof gives the live keys of the envelope proof's secret
	// (INBOUND_PROOF_SECRET, a *secretsource.Source): every envelope is
	// queued with inbound.ProofAttribute, proved with each of them, so
	// that the queue path can tell it from one a queue producer made.
	Proof ProofKeys
	// MaxMessageBytes is the queue's message limit (sqssend.MaxMessageBytes).
	// An envelope larger than it, or than Options.MaxBodyBytes (which the
	// queue path refuses), is refused with 413.
	MaxMessageBytes int
	// Tolerance is how far a signed timestamp may be from now. Zero means
	// inbound.DefaultTolerance.
	Tolerance time.Duration
	// MaxBodyBytes is what the queue path accepts (MAX_BODY_BYTES): a
	// larger envelope is refused with 413. Zero means 1 MiB.
	MaxBodyBytes int
	// Engine is the queue path's: the queue call ends within its budget.
	Engine *oncely.Engine
	Now    func() time.Time
	Logger *slog.Logger
}

// Handler serves the receiving route. It is safe for concurrent use.
type Handler struct {
	o      Options
	budget idem.Budget
}

// New returns a Handler, or an error naming what is missing.
func New(o Options) (*Handler, error) {
	ie := engineref.Idem(o.Engine)
	if o.Sources == nil || o.Queue == nil || o.Proof == nil || o.MaxMessageBytes <= 0 || ie == nil {
		return nil, errors.New("receiving: Options needs Sources, Queue, Proof, MaxMessageBytes and Engine")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = idem.DefaultMaxEventBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Handler{o: o, budget: ie.Budget()}, nil
}

// Result says what happened to one delivery.
type Result struct {
	Outcome WebhookOutcome
	Code    idem.Code
	Key     string
	// Error is the refusal's or the failure's whole story, for the log.
	Error string
}

// SourceSet gives the configured sources.
type SourceSet interface {
	Get(ctx context.Context) (*inbound.Sources, error)
}

// Queue sends one message, with string message attributes, and returns
// its id (*sqssend.Sender).
type Queue interface {
	Send(ctx context.Context, body []byte, attributes map[string]string) (string, error)
}

// ProofKeys gives the envelope proof's live keys, current first
// (*secretsource.Source).
type ProofKeys interface {
	Keys(ctx context.Context) ([][]byte, error)
}

// WebhookOutcome says in one word what happened to one request on the
// receiving route. The outcomes are the metric names of its EMF document
// (Source "webhook") and the outcome of its log line.
type WebhookOutcome string

// The outcomes.
const (
	// WebhookQueued: verified and queued, answered 202.
	WebhookQueued WebhookOutcome = "queued"
	// WebhookRefused: the signature was missing, malformed, wrong or
	// stale (401). Nothing queued.
	WebhookRefused WebhookOutcome = "refused"
	// WebhookUnknownSource: no source of that name (404). Nothing queued.
	WebhookUnknownSource WebhookOutcome = "unknown_source"
	// WebhookTooLarge: the delivery does not fit in a queue message (413).
	// Nothing queued.
	WebhookTooLarge WebhookOutcome = "too_large"
	// WebhookInvalid: authentic, but the body is not JSON or has no
	// usable delivery id (400, 415), or another method (405). Nothing
	// queued.
	WebhookInvalid WebhookOutcome = "invalid"
	// WebhookQueueFailed: verified, but the queue (or the sources' secret)
	// did not answer: 503, or 500 when a retry cannot help. Nothing queued;
	// the sender retries (GitHub does not).
	WebhookQueueFailed WebhookOutcome = "queue_failed"
)

// WebhookOutcomes lists every outcome, in a stable order.
var WebhookOutcomes = []WebhookOutcome{WebhookQueued, WebhookRefused, WebhookUnknownSource, WebhookTooLarge, WebhookInvalid, WebhookQueueFailed}

// webhookStatus is the one table from the receiving route's codes to HTTP
// statuses and outcomes.
var webhookStatus = map[idem.Code]struct {
	status  int
	outcome WebhookOutcome
}{
	idem.CodeSignatureMissing:          {401, WebhookRefused},
	idem.CodeSignatureMalformed:        {401, WebhookRefused},
	idem.CodeSignatureMismatch:         {401, WebhookRefused},
	idem.CodeTimestampOutsideTolerance: {401, WebhookRefused},
	idem.CodeUnknownSource:             {404, WebhookUnknownSource},
	idem.CodeMethodNotAllowed:          {405, WebhookInvalid},
	idem.CodeTooLarge:                  {413, WebhookTooLarge},
	idem.CodeInvalidPayload:            {400, WebhookInvalid},
	idem.CodeKeyMissing:                {400, WebhookInvalid},
	idem.CodeInvalidKey:                {400, WebhookInvalid},
	idem.CodeUnsupportedMediaType:      {415, WebhookInvalid},
}

// Route reports whether req is for the receiving route, and which source
// it names.
func Route(req events.APIGatewayV2HTTPRequest) (source, method string, ok bool) {
	if problem.RouteKeyOf(req) == WebhookRouteKey {
		return req.PathParameters[WebhookPathParameter], req.RequestContext.HTTP.Method, true
	}
	method, path := problem.MethodAndPath(req)
	source, ok = strings.CutPrefix(path, WebhookPathPrefix)
	if !ok || source == "" || strings.Contains(source, "/") {
		return "", "", false
	}
	return source, method, true
}

// delivery is what the log line says about one request on the route.
type delivery struct {
	source, id, key, messageID string
	verified                   bool
	code                       idem.Code
	err                        string
}

// Handle serves one request on the receiving route (see Route) and logs it.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	source, method, ok := Route(req)
	if !ok {
		p := problem.Problem{Status: 404, Code: idem.CodeNotFound, Detail: "no route for this request on " + WebhookPathPrefix + "<source>"}
		return p.Response(), Result{Outcome: WebhookInvalid, Code: p.Code, Error: p.Detail}
	}
	start := h.o.Now()
	resp, d := h.receive(ctx, req, source, method)
	outcome := WebhookQueued
	if d.code != "" {
		outcome = webhookStatus[d.code].outcome
		if d.code == idem.CodeInboundUnavailable {
			outcome = WebhookQueueFailed
		}
	}
	level := slog.LevelInfo
	if outcome != WebhookQueued {
		level = slog.LevelWarn
	}
	// Every refusal names the source and the delivery id (as claimed when
	// not verified): an operator can match it with the sender's own log.
	// (Lambda's log handler adds its own requestId: API Gateway's is
	// apiRequestId here.)
	h.o.Logger.Log(ctx, level, "webhook", "apiRequestId", req.RequestContext.RequestID, "source", clip(d.source, 64),
		"delivery_id", clip(d.id, 128), "verified", d.verified, "outcome", string(outcome), "code", string(d.code),
		"status", resp.StatusCode, "key", d.key, "queued_message_id", d.messageID, "error", d.err,
		"duration_ms", float64(h.o.Now().Sub(start).Microseconds())/1000)
	return resp, Result{Outcome: outcome, Code: d.code, Key: d.key, Error: d.err}
}

// receive verifies one delivery and queues its envelope. Nothing is stored;
// nothing is queued unless the answer is 202.
func (h *Handler) receive(ctx context.Context, req events.APIGatewayV2HTTPRequest, name, method string) (events.APIGatewayV2HTTPResponse, delivery) {
	d := delivery{source: name}
	env, p := h.verify(ctx, req, method, &d)
	if p == nil {
		p = h.enqueue(ctx, env, &d)
	}
	if p != nil {
		d.code, d.err = p.Code, cmp.Or(p.Cause, p.Detail)
		return p.Response(), d
	}
	out, _ := json.Marshal(struct {
		Queued bool   `json:"queued"`
		Key    string `json:"key"`
	}{true, d.key})
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusAccepted, Headers: map[string]string{"Content-Type": "application/json"}, Body: string(out)}, d
}

// verify checks one delivery to d.source and returns the envelope to queue,
// or the problem that refuses it. It fills in what d learns on the way: the
// delivery id (as claimed until verified), whether it was verified, its key.
func (h *Handler) verify(ctx context.Context, req events.APIGatewayV2HTTPRequest, method string, d *delivery) ([]byte, *problem.Problem) {
	if method != Method {
		return nil, webhookProblem(idem.CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s<source>; use %s", method, WebhookPathPrefix, Method))
	}
	src, p := h.source(ctx, d.source)
	if p != nil {
		return nil, p
	}
	limit := min(h.o.MaxBodyBytes, h.o.MaxMessageBytes)
	body, p := problem.DecodeBody(req, limit)
	if p != nil {
		// Too large (refused before the signature is computed) or not
		// base64: nothing of it is looked at.
		p.Cause = "the body was refused before verification"
		return nil, p
	}
	dv, err := src.Verify(req.Headers, body, h.o.Now(), h.o.Tolerance)
	d.id = dv.ID
	if err != nil {
		e := err.(*idem.Error) // Verify's errors are all *idem.Error
		d.verified = webhookStatus[e.Code].status != 401
		if e.Code == idem.CodeInvalidPayload {
			if ct := problem.Header(req.Headers, "Content-Type"); ct != "" && !problem.IsJSON(ct) {
				return nil, webhookProblem(idem.CodeUnsupportedMediaType, fmt.Sprintf("the body is declared as %q; set the sender's content type to application/json", ct))
			}
		}
		p := webhookProblem(e.Code, e.Message)
		if refusal, ok := refusals[e.Code]; ok {
			// The caller learns the class of the problem only; the log
			// keeps which header, how many signatures and secrets.
			p.Detail, p.Cause = refusal, e.Message
		}
		return nil, p
	}
	d.verified, d.key = true, dv.Key
	env := inbound.EnvelopeOf(dv).Encode()
	if len(env) > limit {
		return nil, webhookProblem(idem.CodeTooLarge, fmt.Sprintf("the delivery takes %d bytes queued; the limit is %d", len(env), limit))
	}
	return env, nil
}

// source returns the configured source of that name.
func (h *Handler) source(ctx context.Context, name string) (*inbound.Source, *problem.Problem) {
	sources, err := h.o.Sources.Get(ctx)
	if err != nil {
		return nil, &problem.Problem{Status: 503, Code: idem.CodeInboundUnavailable, Detail: "the webhook sources could not be read; nothing was queued: retry later", RetryAfter: time.Second, Cause: err.Error()}
	}
	src, ok := sources.Lookup(name)
	if !ok {
		what := "that name"
		if inbound.ValidName(name) {
			what = fmt.Sprintf("%q", name)
		}
		return nil, webhookProblem(idem.CodeUnknownSource, "no webhook source "+what+" is configured")
	}
	return src, nil
}

// enqueue queues a verified delivery's envelope, with its proof, within
// the call budget.
func (h *Handler) enqueue(ctx context.Context, env []byte, d *delivery) *problem.Problem {
	keys, err := h.o.Proof.Keys(ctx)
	if err != nil {
		// Not read yet (an outage since the cold start): an unproved
		// envelope would be refused after the cutover, so none is queued.
		return &problem.Problem{Status: 503, Code: idem.CodeInboundUnavailable, Detail: "the delivery was verified but could not be queued; nothing was kept: retry later", RetryAfter: time.Second, Cause: "the envelope proof's secret is not read: " + err.Error()}
	}
	sctx, cancel := h.budget.CallContext(ctx)
	defer cancel()
	d.messageID, err = h.o.Queue.Send(sctx, env, map[string]string{inbound.ProofAttribute: inbound.Prove(keys, env)})
	switch {
	case err == nil:
		return nil
	case idem.Classify(err) == idem.ClassTransient:
		return &problem.Problem{Status: 503, Code: idem.CodeInboundUnavailable, Detail: "the delivery was verified but could not be queued; nothing was kept: retry later", RetryAfter: time.Second, Cause: err.Error()}
	default:
		return &problem.Problem{Status: 500, Code: idem.CodeInboundUnavailable, Detail: "the delivery was verified but could not be queued; the operator can see why in the function's log", Cause: err.Error()}
	}
}

// refusals are what an unauthenticated caller is told of a 401: the class
// of the problem (missing, malformed, mismatched, stale), never how many
// secrets the source has or signatures the request carried, nor, for a
// stale one, whether its signature was right (the timestamp is checked
// first: package inbound).
var refusals = map[idem.Code]string{
	idem.CodeSignatureMissing:          "the delivery is not signed: a signature header is missing",
	idem.CodeSignatureMalformed:        "the delivery's signature headers cannot be read",
	idem.CodeSignatureMismatch:         "the delivery's signature does not match",
	idem.CodeTimestampOutsideTolerance: "the delivery's signed time is outside the tolerance",
}

// webhookProblem is the receiving route's refusal with code, at the status
// the route's table gives it (and for a 405, the Allow header).
func webhookProblem(code idem.Code, detail string) *problem.Problem {
	p := &problem.Problem{Status: webhookStatus[code].status, Code: code, Detail: detail}
	if code == idem.CodeMethodNotAllowed {
		p.Allow = Method
	}
	return p
}

// clip bounds a value a stranger chose before it is logged.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return idem.Truncate(s, n) + "…"
}

// Package apigw makes an API Gateway HTTP API (payload format 2.0) handler
// idempotent under the Idempotency-Key header, as the IETF
// Idempotency-Key draft and Stripe describe it, around the team's own
// handler:
//
//   - 400 without a valid key, or with a body that is not a JSON document;
//     413 for a body over the limit, 415 for a declared type that is not
//     JSON, 401 when an authorizer ran and named no caller;
//   - the first response is stored (status, headers, body) and replayed to
//     every retry with the same key, with Idempotent-Replayed: true;
//   - 409 with Retry-After while the first request is in flight;
//   - 422 for the same key with another body, and for a stored permanent
//     failure (replayed the same way every time);
//   - 503 with Retry-After after a transient failure, with the key released:
//     the retry runs the handler again.
//
// Keys are scoped by caller: the same Idempotency-Key from two callers is
// two keys, and neither sees the other's response (see [Scope]). The
// handler gets the scoped key with oncely.KeyFrom, to pass downstream.
//
// Which responses are stored is the status's choice ([StoreStatus]): 2xx,
// 3xx and 4xx are, but 408, 409, 425 and 429, which ask the client to
// retry; those and 5xx are returned as they are, the key released. A
// response without a status is a 200. Failures
// reported as errors are the engine's: mark them with oncely.Transient,
// oncely.Permanent and friends. Every refusal and failure is an RFC 9457
// problem document (application/problem+json) with a code and a fixed
// sentence, never the error's text.
//
// Only payload format 2.0 is served: a REST API's proxy events (v1) are
// not, since their caller scope is not implemented yet.
package apigw

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/problem"
)

// The request header that carries the client's key, and the response
// header that marks a replay.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

// DefaultMaxBodyBytes is Options.MaxBodyBytes' default: 1 MiB.
const DefaultMaxBodyBytes = idem.DefaultMaxEventBytes

// maxClientKey leaves room in the 128-character key for the "api:" prefix
// and the caller scope.
const maxClientKey = 100

// Options configure a [HandlerV2]. Every field documents its zero value.
type Options struct {
	// MaxBodyBytes refuses larger bodies with 413, before any store call.
	// Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int
	// JWTIssuer is the issuer the API's JWT authorizer is configured with:
	// its tokens are scoped by sub alone; a token of any other issuer by
	// its issuer and sub (see [Scope]). Empty: every token by both.
	JWTIssuer string
	// Store reports whether a response with this status is stored and
	// replayed. Nil means StoreStatus.
	Store func(status int) bool
	// OnReplay, if set, is called with every replayed response (a stored
	// success or a stored failure) before it is returned: to add a header,
	// or count a metric. Its ctx carries the scoped key (oncely.KeyFrom).
	OnReplay func(ctx context.Context, req events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse)
}

// StoreStatus is the default rule of which responses are stored: 2xx,
// 3xx (a redirect after the side effect, such as 303 See Other, is its
// answer) and 4xx, but 408 (Request Timeout), 409 (Conflict), 425 (Too
// Early) and 429 (Too Many Requests), which ask the client to retry, as
// every 5xx does.
func StoreStatus(status int) bool {
	switch {
	case status == 408, status == 409, status == 425, status == 429:
		return false
	case status >= 200 && status < 500:
		return true
	}
	return false
}

// WorkV2 is what runs once per scoped key: the team's handler, returning
// its response and optionally writes to commit with the record (see
// oncely.Work), or an error marked with oncely.Transient, oncely.Permanent
// and friends.
type WorkV2 func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error)

// HandlerV2 serves HTTP API requests. It is safe for concurrent use.
type HandlerV2 struct {
	engine *oncely.Engine
	ie     *idem.Engine
	work   WorkV2
	o      Options
}

// NewV2 returns a HandlerV2 around work, or an error naming what is
// missing.
func NewV2(e *oncely.Engine, work WorkV2, o Options) (*HandlerV2, error) {
	ie := engineref.Idem(e)
	switch {
	case ie == nil:
		return nil, errors.New("apigw: an engine is required")
	case work == nil:
		return nil, errors.New("apigw: a handler is required")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Store == nil {
		o.Store = StoreStatus
	}
	return &HandlerV2{engine: e, ie: ie, work: work, o: o}, nil
}

// WrapV2 returns fn made idempotent, for lambda.Start. WrapV2 panics where
// NewV2 returns an error (a wiring mistake, found at init).
func WrapV2(e *oncely.Engine, fn func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), o Options) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	if fn == nil {
		panic("apigw: a handler is required")
	}
	h, err := NewV2(e, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		resp, err := fn(ctx, req)
		return resp, nil, err
	}, o)
	if err != nil {
		panic(err.Error())
	}
	return h.Lambda
}

// Result says what happened to one request.
type Result struct {
	// Label says what happened, in one word (see driver.Label).
	Label driver.Label
	// Code is the refusal's or the failure's code, if any.
	Code oncely.Code
	// Key is the scoped key, once the request had a valid one.
	Key string
	// Attempts is the record's attempt count.
	Attempts int
	// Replayed is true when the response is a stored one.
	Replayed bool
	// Error is the failure's whole story, for the log: the caller gets a
	// code and a fixed sentence.
	Error string
}

// Lambda serves one request for lambda.Start: [HandlerV2.Handle] without
// the result. It never returns an error: every failure is a response.
func (h *HandlerV2) Lambda(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	resp, _ := h.Handle(ctx, req)
	return resp, nil
}

// notStored carries a response whose status asks for a retry: it is
// returned as it is, and nothing is stored.
type notStored struct{ status int }

func (n *notStored) Error() string {
	return fmt.Sprintf("the handler answered %d, which is not stored", n.status)
}

// Handle serves one request: it checks it before any store call (the
// caller, the body, the key), runs the handler at most once for the
// request's scoped key, and answers with the stored response, the
// handler's own unstored one, or a problem.
func (h *HandlerV2) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	r, p := h.request(req)
	if p != nil {
		return p.Response(), Result{Label: idem.LabelPoison, Code: p.Code, Key: r.Key}
	}
	// The last response the handler gave that is not stored, for this
	// call only: an abandoned handler may still write it, so it is atomic.
	var unstored atomic.Pointer[events.APIGatewayV2HTTPResponse]
	out := engineref.Run(h.engine, ctx, idem.Request(r), func(ctx context.Context) ([]byte, idem.Effects, error) {
		resp, effects, err := h.work(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode == 0 {
			resp.StatusCode = 200 // as Lambda's proxy answers a response without one
		}
		if !h.o.Store(resp.StatusCode) {
			unstored.Store(&resp)
			// One run per request: the client decides when to retry.
			return nil, nil, oncely.TransientNextDelivery(&notStored{resp.StatusCode})
		}
		stored, err := encode(resp)
		if err != nil {
			return nil, nil, oncely.Permanent(err)
		}
		return stored, effects, nil
	})
	res := Result{Label: out.Label(), Key: r.Key, Attempts: out.Attempts, Replayed: out.Replayed}
	var resp events.APIGatewayV2HTTPResponse
	if out.Err != nil {
		res.Code, res.Error = out.Err.Code, out.Err.Detail()
		if _, ours := errors.AsType[*notStored](out.Err); ours && !out.Stored {
			if u := unstored.Load(); u != nil {
				return *u, res
			}
		}
		// After a request that may have reached the receiver, the engine's
		// RetryAfter is at least its pause (oncely.Options.SentPause), which
		// the record's hold-off enforces on a caller who ignores it (409).
		resp = problem.Problem{Status: status(out), Code: out.Err.Code, Detail: detail(out), RetryAfter: out.Err.RetryAfter}.Response()
	} else {
		var err error
		if resp, err = decode(out.Result); err != nil {
			res.Label, res.Code = idem.LabelStoreError, idem.CodeCorruptRecord
			return problem.Problem{Status: 500, Code: idem.CodeCorruptRecord, Detail: "the stored response cannot be read"}.Response(), res
		}
	}
	if out.Replayed {
		resp.Headers[HeaderReplayed] = "true"
		if h.o.OnReplay != nil {
			h.o.OnReplay(engineref.WithKey(ctx, r.Key), req, &resp)
		}
	}
	return resp, res
}

// request checks req before any store call: its caller, its body and its
// key. It returns the engine's request (its Key set once the key is
// known), or the problem that refuses it.
func (h *HandlerV2) request(req events.APIGatewayV2HTTPRequest) (oncely.Request, *problem.Problem) {
	scope, ok := Scope(req, h.o.JWTIssuer)
	if !ok {
		// An authorizer ran and named nobody: no key space is this
		// caller's, and the shared one is NONE's alone.
		return oncely.Request{}, &problem.Problem{Status: 401, Code: idem.CodeNoIdentity,
			Detail: "the authorizer named no caller (a token without sub, or no principal); keys are scoped by caller, so the request is refused"}
	}
	payload, p := body(req, h.o.MaxBodyBytes)
	if p != nil {
		return oncely.Request{}, p
	}
	ck, err := clientKey(req.Headers)
	if err != nil {
		return oncely.Request{}, &problem.Problem{Status: 400, Code: idem.CodeInvalidKey, Detail: err.Error()}
	}
	// The handler gets the scoped key: a downstream de-duplicating on it
	// must not merge two callers who chose the same Idempotency-Key.
	key := ScopedKey(scope, ck)
	r, err := oncely.NewRequest(key, payload)
	if err != nil {
		var e *oncely.Error
		errors.As(err, &e)
		return oncely.Request{Key: key}, &problem.Problem{Status: 400, Code: idem.CodeInvalidPayload, Detail: "the body must be a JSON document: " + e.Message}
	}
	return r, nil
}

// body returns req's body after checking its declared type (415) and its
// size (413), base64-decoded when API Gateway encoded it.
func body(req events.APIGatewayV2HTTPRequest, limit int) ([]byte, *problem.Problem) {
	if ct := problem.Header(req.Headers, "Content-Type"); ct != "" && !problem.IsJSON(ct) {
		return nil, &problem.Problem{Status: 415, Code: idem.CodeUnsupportedMediaType, Detail: fmt.Sprintf("the body is declared as %q; send application/json", ct)}
	}
	return problem.DecodeBody(req, limit)
}

// clientKey reads and validates the Idempotency-Key header. The draft
// makes it a structured-header string, so surrounding quotes are removed.
func clientKey(headers map[string]string) (string, error) {
	v := problem.Header(headers, HeaderKey)
	if v == "" {
		return "", fmt.Errorf("the %s header is required", HeaderKey)
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if err := ValidateClientKey(v); err != nil {
		return "", err
	}
	return v, nil
}

// status is the one table from engine outcomes to HTTP statuses.
func status(out idem.Outcome) int {
	switch code := out.Err.Code; {
	case out.Stored:
		// A stored permanent failure, whatever its code (RETRY_EXHAUSTED
		// included): the same 4xx every time it is replayed.
		return 422
	case code == idem.CodeInProgress:
		return 409
	case code == idem.CodeKeyReused:
		return 422
	case code == idem.CodeInvalidKey, code == idem.CodeInvalidPayload:
		return 400
	case code == idem.CodeStoreMisconfigured:
		return 500
	default:
		// TRANSIENT_FAILURE, DEADLINE, ABANDONED, LEASE_LOST, STORE_UNAVAILABLE: nothing
		// final is stored and the key is free again (or soon): retry with
		// the same key after Retry-After.
		return 503
	}
}

// detail is what a caller is told. A stored failure is its stored message,
// replayed byte for byte: a fixed sentence for its code (a record stored
// by an older version keeps its own). For everything the caller cannot act
// on but by retrying, a fixed sentence too: the internal message names
// tables, hosts and addresses that are none of the caller's business.
func detail(out idem.Outcome) string {
	if out.Stored {
		return out.Err.Message
	}
	switch out.Err.Code {
	case idem.CodeStoreUnavailable:
		return "the idempotency store did not answer in time; retry later with the same key"
	case idem.CodeStoreMisconfigured:
		return "the idempotency store refused the request; the operator can see why in the function's log"
	case idem.CodeLeaseLost:
		return "another worker took this request over; retry later with the same key"
	case idem.CodeDeadline:
		return "too little time was left to start; retry later with the same key"
	case idem.CodeTransientFailure:
		return "the action failed for now and nothing was kept; retry later with the same key"
	case idem.CodeAbandoned:
		return "the action did not finish in time; retry later with the same key"
	}
	return out.Err.Message
}

// defaultContentType is the Content-Type of a stored response that names
// none: it is not stored (records of earlier releases have none).
const defaultContentType = "application/json"

// unstoredHeaders are not kept with a response: hop-by-hop headers, the
// length (API Gateway sets it), the replay mark (set on each replay) and
// Content-Type (kept apart).
var unstoredHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Content-Length", HeaderReplayed, "Content-Type"}

// encode is the stored form of a response: the result envelope of the
// ready function's actions, with the headers and cookies besides, so that
// records written before either existed replay as they always did.
func encode(resp events.APIGatewayV2HTTPResponse) ([]byte, error) {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(resp.Body); err != nil {
			return nil, fmt.Errorf("apigw: the handler's response is marked base64 but its body is not: %w", err)
		}
	}
	r := action.Result{Status: resp.StatusCode, Body: body, Cookies: resp.Cookies}
	for name, v := range resp.Headers {
		canon := http.CanonicalHeaderKey(name)
		switch {
		case canon == "Content-Type":
			if v != defaultContentType {
				r.ContentType = v
			}
		case !contains(unstoredHeaders, canon):
			if r.Headers == nil {
				r.Headers = map[string]string{}
			}
			r.Headers[name] = v
		}
	}
	return action.Encode(r), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// decode is the response a stored one replays as.
func decode(stored []byte) (events.APIGatewayV2HTTPResponse, error) {
	r, err := action.Decode(stored)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: r.Status, Headers: map[string]string{}, Cookies: r.Cookies}
	for name, v := range r.Headers {
		resp.Headers[name] = v
	}
	resp.Headers["Content-Type"] = defaultContentType
	if r.ContentType != "" {
		resp.Headers["Content-Type"] = r.ContentType
	}
	if utf8.Valid(r.Body) {
		resp.Body = string(r.Body)
	} else {
		resp.Body, resp.IsBase64Encoded = base64.StdEncoding.EncodeToString(r.Body), true
	}
	return resp, nil
}

// Package httpapi serves POST /events from API Gateway HTTP APIs (payload
// format 2.0) with the semantics of the IETF Idempotency-Key header draft:
// the first success is stored and replayed byte for byte with
// Idempotent-Replayed: true; a retry while the first is in flight gets 409;
// a key reused with another body gets 422.
//
// This package alone maps the engine's codes to HTTP statuses (see status).
// Requests are checked before any store call: the route (404, 405), the
// caller's identity (401), the body's size (413) and declared type (415),
// the key and the JSON (400).
//
// When Options.Webhooks is set it also serves the receiving route POST
// /webhooks/{source} (webhooks.go): a signed delivery from another service
// is verified, queued and answered 202, with no store call at all.
package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
)

// The one route this adapter serves, and its request header.
const (
	Method    = "POST"
	Path      = "/events"
	RouteKey  = Method + " " + Path
	HeaderKey = "Idempotency-Key"
)

// maxClientKey leaves room in the 128-character key for the "api:" prefix
// and the caller scope.
const maxClientKey = 100

// Options configure a Handler. Engine and Action are required.
type Options struct {
	Engine *idem.Engine
	Action action.Func
	// MaxBodyBytes refuses larger bodies with 413. Zero means
	// idem.DefaultMaxEventBytes.
	MaxBodyBytes int
	// JWTIssuer is the issuer the API's JWT authorizer is configured with
	// (JWT_ISSUER): its tokens are scoped by sub alone, as they always
	// were; a token of any other issuer by its issuer and sub. Empty: every
	// token is scoped by issuer and sub.
	JWTIssuer string
	// Webhooks, if set, serve the receiving route POST /webhooks/{source};
	// nil leaves it off (404, like any other route).
	Webhooks *Webhooks
	Now      func() time.Time
	Logger   *slog.Logger
}

// Handler serves API Gateway v2 requests. It is safe for concurrent use:
// its options are read-only once New returns.
type Handler struct{ o Options }

// New returns a Handler, or an error naming the missing option.
func New(o Options) (*Handler, error) {
	if o.Engine == nil || o.Action == nil {
		return nil, errors.New("httpapi: Options.Engine and Options.Action are required")
	}
	if w := o.Webhooks; w != nil && (w.Sources == nil || w.Queue == nil || w.MaxMessageBytes <= 0) {
		return nil, errors.New("httpapi: Options.Webhooks needs Sources, Queue and MaxMessageBytes")
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
	return &Handler{o: o}, nil
}

// Result says what happened to one request.
type Result struct {
	Label    idem.Label
	Code     idem.Code
	Key      string
	Attempts int
	// Error is the failure's whole story, for the log (idem.Error.Detail):
	// callers get a code and a fixed sentence (see detail).
	Error string
	// Webhook is set, instead of Label, for a request on the receiving
	// route: what happened to the delivery.
	Webhook WebhookOutcome
}

// Handle serves one request. Its log line names the API Gateway request
// as apiRequestId: requestId is the Lambda invocation's, which the Lambda
// log handler adds from ctx (under Lambda Managed Instances the lines of
// concurrent invocations interleave, and that id is what tells them apart).
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	if h.o.Webhooks != nil {
		if source, method, ok := webhookRoute(req); ok {
			return h.webhook(ctx, req, source, method)
		}
	}
	start := h.o.Now()
	resp, res := h.handle(ctx, req)
	h.o.Logger.InfoContext(ctx, "request", "apiRequestId", req.RequestContext.RequestID, "key", res.Key, "outcome", string(res.Label),
		"code", string(res.Code), "status", resp.StatusCode, "attempts", res.Attempts, "error", res.Error,
		"duration_ms", float64(h.o.Now().Sub(start).Microseconds())/1000)
	return resp, res
}

func (h *Handler) handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	r, ev, p := h.request(req)
	if p != nil {
		return p.response(), Result{Label: idem.LabelPoison, Code: p.code, Key: ev.Key}
	}
	out := h.o.Engine.DoWork(ctx, r, action.Work(h.o.Action, ev))
	res := Result{Label: out.Label(), Key: ev.Key, Attempts: out.Attempts}
	if out.Err != nil {
		res.Code, res.Error = out.Err.Code, out.Err.Detail()
		// After a request that may have reached the receiver, the engine's
		// RetryAfter is at least its pause (idem.Options.SentPause), which
		// the record's hold-off enforces on a caller who ignores it (409).
		p := problem{status: status(out), code: out.Err.Code, detail: detail(out), retryAfter: out.Err.RetryAfter}
		return replayed(p.response(), out.Replayed), res
	}
	stored, err := action.Decode(out.Result)
	if err != nil {
		res.Label, res.Code = idem.LabelStoreError, idem.CodeCorruptRecord
		return problem{status: 500, code: idem.CodeCorruptRecord, detail: "the stored result cannot be read"}.response(), res
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: stored.Status, Body: string(stored.Body), Headers: map[string]string{"Content-Type": contentType(stored)}}
	return replayed(resp, out.Replayed), res
}

// request checks req before any store call: its route, its caller, its
// body and its key. It returns the engine's request and the action's event,
// or the problem that refuses it (with the event's Key set once the key is
// known).
func (h *Handler) request(req events.APIGatewayV2HTTPRequest) (idem.Request, action.Event, *problem) {
	if p := checkRoute(req); p != nil {
		return idem.Request{}, action.Event{}, p
	}
	scope, ok := Scope(req, h.o.JWTIssuer)
	if !ok {
		// An authorizer ran and named nobody: no key space is this
		// caller's, and the shared one is NONE's alone.
		return idem.Request{}, action.Event{}, &problem{status: 401, code: idem.CodeNoIdentity,
			detail: "the authorizer named no caller (a token without sub, or no principal); keys are scoped by caller, so the request is refused"}
	}
	body, p := h.body(req)
	if p != nil {
		return idem.Request{}, action.Event{}, p
	}
	ck, err := clientKey(req.Headers)
	if err != nil {
		return idem.Request{}, action.Event{}, &problem{status: 400, code: idem.CodeInvalidKey, detail: err.Error()}
	}
	// The action gets the scoped key: a downstream de-duplicating on it must
	// not merge two callers who chose the same Idempotency-Key.
	key := ScopedKey(scope, ck)
	ev := action.Event{Key: key, Body: json.RawMessage(body), Source: action.SourceHTTP, ID: req.RequestContext.RequestID}
	r, err := idem.NewRequest(key, body)
	if err != nil {
		return idem.Request{}, ev, &problem{status: 400, code: idem.CodeInvalidPayload, detail: "the body must be a JSON document: " + err.(*idem.Error).Message}
	}
	return r, ev, nil
}

// replayed marks resp as a replay of the stored answer when it is one.
func replayed(resp events.APIGatewayV2HTTPResponse, replay bool) events.APIGatewayV2HTTPResponse {
	if replay {
		resp.Headers["Idempotent-Replayed"] = "true"
	}
	return resp
}

// checkRoute accepts POST /events (nil) or returns the problem: 405 on
// /events, 404 elsewhere. It trusts routeKey when API Gateway matched a
// route (for an ANY route, with the request's method); only for the
// catch-all $default route does it look at the path, without a named
// stage's prefix (rawPath carries it). AWS documents that rawPath does not
// carry a custom domain's API mapping key; if yours does, the request is
// refused (404), never served: route POST /events explicitly.
func checkRoute(req events.APIGatewayV2HTTPRequest) *problem {
	if routeKeyOf(req) == RouteKey {
		return nil
	}
	method, path := methodAndPath(req)
	switch {
	case path == Path && method == Method:
		return nil
	case path == Path:
		return &problem{status: 405, code: idem.CodeMethodNotAllowed, detail: fmt.Sprintf("%s is not allowed on %s; use %s", method, Path, Method), allow: Method}
	default:
		return &problem{status: 404, code: idem.CodeNotFound, detail: fmt.Sprintf("no route for %s %s; this API serves %s", method, path, RouteKey)}
	}
}

// routeKeyOf is the route API Gateway matched.
func routeKeyOf(req events.APIGatewayV2HTTPRequest) string {
	if req.RouteKey != "" {
		return req.RouteKey
	}
	return req.RequestContext.RouteKey
}

// methodAndPath returns the request's method and path as the route check
// reads them: from a matched route's key (for an ANY route, with the
// request's method), or for the catch-all $default route from the request,
// without a named stage's prefix (rawPath carries it).
func methodAndPath(req events.APIGatewayV2HTTPRequest) (method, path string) {
	switch routeKey := routeKeyOf(req); routeKey {
	case "$default", "":
		method, path = req.RequestContext.HTTP.Method, req.RawPath
		if path == "" {
			path = req.RequestContext.HTTP.Path
		}
		if stage := req.RequestContext.Stage; stage != "" && stage != "$default" {
			if rest, ok := strings.CutPrefix(path, "/"+stage); ok && (rest == "" || rest[0] == '/') {
				path = rest
			}
		}
	default:
		method, path, _ = strings.Cut(routeKey, " ")
		if method == "ANY" {
			method = req.RequestContext.HTTP.Method
		}
	}
	return method, path
}

// body returns the request body after checking its declared type (415) and
// its size (413). A body that is not JSON is the engine's 400.
func (h *Handler) body(req events.APIGatewayV2HTTPRequest) ([]byte, *problem) {
	if ct := header(req.Headers, "Content-Type"); ct != "" && !isJSON(ct) {
		return nil, &problem{status: 415, code: idem.CodeUnsupportedMediaType, detail: fmt.Sprintf("the body is declared as %q; send application/json", ct)}
	}
	return decodeBody(req, h.o.MaxBodyBytes)
}

// decodeBody returns the request's body bytes (base64-decoded when API
// Gateway encoded them), refusing more than limit bytes with 413 before
// decoding.
func decodeBody(req events.APIGatewayV2HTTPRequest, limit int) ([]byte, *problem) {
	tooLarge := func(n int) *problem {
		return &problem{status: 413, code: idem.CodeTooLarge, detail: fmt.Sprintf("the body is %d bytes; the limit is %d", n, limit)}
	}
	if !req.IsBase64Encoded {
		if len(req.Body) > limit {
			return nil, tooLarge(len(req.Body))
		}
		return []byte(req.Body), nil
	}
	if n := base64.StdEncoding.DecodedLen(len(req.Body)); n > limit+2 {
		// Refused before decoding: no allocation for an oversized body.
		return nil, tooLarge(n)
	}
	body, err := base64.StdEncoding.DecodeString(req.Body)
	if err != nil {
		return nil, &problem{status: 400, code: idem.CodeInvalidPayload, detail: "the body is not valid base64"}
	}
	if len(body) > limit {
		return nil, tooLarge(len(body))
	}
	return body, nil
}

// isJSON accepts application/json and any */*+json, with parameters.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func header(headers map[string]string, name string) string {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Scope returns the caller identity that keys are scoped by, so that one
// client can never read or block another's results, and whether the
// request has one. issuer is the JWT authorizer's configured issuer.
//
// The scope is hashed into every stored key, so a caller whose identity is
// unchanged must keep its scope string across releases, or its retries
// would run again (a test replays records stored under these strings):
//
//	no authorizer (ApiAuth=NONE)          "anonymous": one key space shared by every caller
//	JWT from the configured issuer        "jwt:<sub>"
//	JWT from another issuer               "jwt@<quoted issuer>:<sub>"
//	IAM, from a Cognito identity pool     "cognito:<pool id>/<identity id>"
//	IAM, any other principal              "iam:<principal>" (an assumed role by its role, not its session)
//	a Lambda authorizer                   "lambda:<principalId>"
//
// An authorizer that names no caller (a JWT without sub, IAM without a
// principal, a Lambda authorizer without principalId) gives ok false: the
// request is refused rather than put in a shared key space.
func Scope(req events.APIGatewayV2HTTPRequest, issuer string) (scope string, ok bool) {
	a := req.RequestContext.Authorizer
	switch {
	case a == nil:
		return "anonymous", true
	case a.JWT != nil:
		sub := a.JWT.Claims["sub"]
		if sub == "" {
			return "", false
		}
		return JWTScope(a.JWT.Claims["iss"], sub, issuer), true
	case a.IAM != nil:
		// Every caller of an identity pool assumes the pool's role: the
		// role would put them all in one key space. The identity id is theirs.
		if c := a.IAM.CognitoIdentity; c.IdentityID != "" {
			return CognitoScope(c.IdentityPoolID, c.IdentityID), true
		}
		if a.IAM.UserARN == "" {
			return "", false
		}
		return "iam:" + NormalizePrincipal(a.IAM.UserARN), true
	case a.Lambda != nil:
		if p, ok := a.Lambda["principalId"].(string); ok && p != "" {
			return "lambda:" + p, true
		}
	}
	return "", false
}

// JWTScope is the scope of a token with issuer iss and subject sub, when
// the authorizer is configured with issuer configured. A token of the
// configured issuer keeps the scope it always had, "jwt:<sub>"; any other
// issuer's is qualified by it, quoted so that no issuer and subject can
// spell another pair's scope.
func JWTScope(iss, sub, configured string) string {
	if iss == configured {
		return "jwt:" + sub
	}
	return "jwt@" + strconv.Quote(iss) + ":" + sub
}

// CognitoScope is the scope of an IAM caller from a Cognito identity pool:
// its identity, not the pool's role that every such caller assumes.
func CognitoScope(pool, identity string) string {
	return "cognito:" + pool + "/" + identity
}

// NormalizePrincipal turns an assumed-role session ARN
// (arn:aws:sts::111122223333:assumed-role/Role/session) into the role's
// (arn:aws:sts::111122223333:assumed-role/Role). Other ARNs are returned as
// they are.
func NormalizePrincipal(arn string) string {
	const marker = ":assumed-role/"
	i := strings.Index(arn, marker)
	if i < 0 || !strings.HasPrefix(arn, "arn:") {
		return arn
	}
	rest := arn[i+len(marker):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return arn[:i+len(marker)+j]
	}
	return arn
}

// ScopedKey is the key stored, and sent downstream, for a client's key
// within its scope. The scope is hashed: principals may hold characters
// keys may not.
func ScopedKey(scope, clientKey string) string {
	sum := sha256.Sum256([]byte(scope))
	return scopedKeyPrefix + hex.EncodeToString(sum[:8]) + ":" + clientKey
}

// scopedKeyPrefix begins every key ScopedKey makes.
const scopedKeyPrefix = "api:"

// IsScopedKey reports whether key has the form ScopedKey gives: an API
// request's key (its caller retries it), not an SQS event's (its message
// is gone once acknowledged).
func IsScopedKey(key string) bool {
	return strings.HasPrefix(key, scopedKeyPrefix)
}

// clientKey reads and validates the Idempotency-Key header. The draft
// makes it a structured-header string, so surrounding quotes are removed.
func clientKey(headers map[string]string) (string, error) {
	v := header(headers, HeaderKey)
	if v == "" {
		return "", fmt.Errorf("the %s header is required", HeaderKey)
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if len(v) < 8 || len(v) > maxClientKey {
		return "", fmt.Errorf("the %s header must be 8 to %d characters, got %d", HeaderKey, maxClientKey, len(v))
	}
	if err := idem.ValidateKey(v); err != nil {
		return "", fmt.Errorf("the %s header is invalid: %s", HeaderKey, err.(*idem.Error).Message)
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
// replayed byte for byte: a fixed sentence for its code (idem.Sentence; a
// record stored by an older version keeps its own). For everything the
// caller cannot act on but by retrying, a fixed sentence too: the internal
// message names tables, hosts and addresses that are none of the caller's
// business (it is logged).
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

func contentType(r action.Result) string {
	if r.ContentType == "" {
		return "application/json"
	}
	return r.ContentType
}

// problemDoc is an RFC 9457 problem details document.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// A problem is a refusal or a failure, answered with an RFC 9457 problem
// details document: the status, the code and what the caller is told.
type problem struct {
	status int
	code   idem.Code
	detail string
	// retryAfter, for a 409 or a 503, is rounded up to the Retry-After
	// header's seconds, at least one.
	retryAfter time.Duration
	// allow, for a 405, is the Allow header: the method the route takes.
	allow string
	// cause, when set, is what the log line says instead of detail (the
	// receiving route logs an internal error, or why nothing was verified).
	cause string
}

// response builds the application/problem+json response. The body depends
// only on the problem, so a replayed failure is byte-identical.
func (p problem) response() events.APIGatewayV2HTTPResponse {
	body, _ := json.Marshal(problemDoc{
		Type:   "urn:oncely:problem:" + strings.ToLower(string(p.code)),
		Title:  titles[p.status],
		Status: p.status,
		Detail: p.detail,
		Code:   string(p.code),
	})
	resp := events.APIGatewayV2HTTPResponse{
		StatusCode: p.status,
		Headers:    map[string]string{"Content-Type": "application/problem+json"},
		Body:       string(body),
	}
	if p.status == 409 || p.status == 503 {
		secs := max(int(math.Ceil(p.retryAfter.Seconds())), 1)
		resp.Headers["Retry-After"] = strconv.Itoa(secs)
	}
	if p.allow != "" {
		resp.Headers["Allow"] = p.allow
	}
	return resp
}

var titles = map[int]string{
	400: "Bad Request",
	401: "Unauthorized",
	404: "Not Found",
	405: "Method Not Allowed",
	409: "Conflict: the request with this key is still in flight",
	413: "Content Too Large",
	415: "Unsupported Media Type",
	422: "Unprocessable Content",
	500: "Internal Server Error",
	503: "Service Unavailable: retry later with the same key",
}

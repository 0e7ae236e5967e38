// Package eventsapi is the ready function's API: POST /events, served by
// the public apigw adapter around the configured action (the Idempotency-Key
// semantics, the caller scope and the statuses are apigw's). Requests are
// checked before any store call: the route here (404, 405), then by apigw
// the caller's identity (401), the body's size (413) and declared type
// (415), the key and the JSON (400).
package eventsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/problem"
)

// The one route this adapter serves, and its request header.
const (
	Method    = "POST"
	Path      = "/events"
	RouteKey  = Method + " " + Path
	HeaderKey = apigw.HeaderKey
)

// Options configure a Handler. Engine and Action are required.
type Options struct {
	Engine *oncely.Engine
	Action action.Func
	// MaxBodyBytes refuses larger bodies with 413. Zero means
	// idem.DefaultMaxEventBytes.
	MaxBodyBytes int
	// JWTIssuer is the issuer the API's JWT authorizer is configured with
	// (JWT_ISSUER): its tokens are scoped by sub alone, as they always
	// were; a token of any other issuer by its issuer and sub. Empty: every
	// token is scoped by issuer and sub.
	JWTIssuer string
	Now       func() time.Time
	Logger    *slog.Logger
}

// Handler serves API Gateway v2 requests. It is safe for concurrent use:
// its options are read-only once New returns.
type Handler struct {
	o   Options
	api *apigw.HandlerV2 // POST /events
}

// New returns a Handler, or an error naming the missing option.
func New(o Options) (*Handler, error) {
	if o.Engine == nil || o.Action == nil {
		return nil, errors.New("eventsapi: Options.Engine and Options.Action are required")
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
	h := &Handler{o: o}
	api, err := apigw.NewV2(o.Engine, h.work, apigw.Options{MaxBodyBytes: o.MaxBodyBytes, JWTIssuer: o.JWTIssuer})
	if err != nil {
		return nil, err
	}
	h.api = api
	return h, nil
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
}

// Handle serves one request. Its log line names the API Gateway request
// as apiRequestId: requestId is the Lambda invocation's, which the Lambda
// log handler adds from ctx (under Lambda Managed Instances the lines of
// concurrent invocations interleave, and that id is what tells them apart).
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	start := h.o.Now()
	resp, res := h.handle(ctx, req)
	h.o.Logger.InfoContext(ctx, "request", "apiRequestId", req.RequestContext.RequestID, "key", res.Key, "outcome", string(res.Label),
		"code", string(res.Code), "status", resp.StatusCode, "attempts", res.Attempts, "error", res.Error,
		"duration_ms", float64(h.o.Now().Sub(start).Microseconds())/1000)
	return resp, res
}

func (h *Handler) handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, Result) {
	if p := checkRoute(req); p != nil {
		return p.Response(), Result{Label: idem.LabelPoison, Code: p.Code}
	}
	resp, r := h.api.Handle(ctx, req)
	return resp, Result{Label: r.Label, Code: r.Code, Key: r.Key, Attempts: r.Attempts, Error: r.Error}
}

// work is POST /events' handler under apigw: the action, with the
// request's body and the scoped key, its result as the response, its
// failures as the errors it marked.
func (h *Handler) work(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
	body, p := problem.DecodeBody(req, h.o.MaxBodyBytes) // apigw accepted it before the work began
	if p != nil {
		return events.APIGatewayV2HTTPResponse{}, nil, oncely.Permanent(errors.New(p.Detail))
	}
	key, _ := oncely.KeyFrom(ctx)
	r, err := h.o.Action(ctx, action.Event{Key: key, Body: json.RawMessage(body), Source: action.SourceHTTP, ID: req.RequestContext.RequestID})
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, nil, err
	}
	status := r.Status
	if status == 0 {
		status = 200
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: status, Body: string(r.Body), Cookies: r.Cookies, Headers: map[string]string{}}
	for name, v := range r.Headers {
		resp.Headers[name] = v
	}
	resp.Headers["Content-Type"] = contentType(r)
	return resp, r.Effects, nil
}

func contentType(r action.Result) string {
	if r.ContentType == "" {
		return "application/json"
	}
	return r.ContentType
}

// checkRoute accepts POST /events (nil) or returns the problem: 405 on
// /events, 404 elsewhere. It trusts routeKey when API Gateway matched a
// route (for an ANY route, with the request's method); only for the
// catch-all $default route does it look at the path, without a named
// stage's prefix (rawPath carries it). AWS documents that rawPath does not
// carry a custom domain's API mapping key; if yours does, the request is
// refused (404), never served: route POST /events explicitly.
func checkRoute(req events.APIGatewayV2HTTPRequest) *problem.Problem {
	if problem.RouteKeyOf(req) == RouteKey {
		return nil
	}
	method, path := problem.MethodAndPath(req)
	switch {
	case path == Path && method == Method:
		return nil
	case path == Path:
		return &problem.Problem{Status: 405, Code: idem.CodeMethodNotAllowed, Detail: fmt.Sprintf("%s is not allowed on %s; use %s", method, Path, Method), Allow: Method}
	default:
		return &problem.Problem{Status: 404, Code: idem.CodeNotFound, Detail: fmt.Sprintf("no route for %s %s; this API serves %s", method, path, RouteKey)}
	}
}

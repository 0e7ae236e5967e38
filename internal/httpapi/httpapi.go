// Package httpapi serves POST /events from API Gateway HTTP APIs (payload
// format 2.0) with the semantics of the IETF Idempotency-Key header draft:
// the first success is stored and replayed byte for byte with
// Idempotent-Replayed: true; a retry while the first is in flight gets 409;
// a key reused with another body gets 422.
//
// This package alone maps the engine's codes to HTTP statuses (see status).
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
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/emf"
	"github.com/oncely/oncely/internal/idem"
)

// HeaderKey is the request header carrying the idempotency key.
const HeaderKey = "Idempotency-Key"

// maxClientKey leaves room in the 128-character key for the "api:" prefix
// and the caller scope.
const maxClientKey = 100

// Options configure a Handler. Engine and Action are required.
type Options struct {
	Engine *idem.Engine
	Action action.Func
	Now    func() time.Time
	Logger *slog.Logger
}

// Handler serves API Gateway v2 requests.
type Handler struct{ o Options }

// New returns a Handler, or an error naming the missing option.
func New(o Options) (*Handler, error) {
	if o.Engine == nil || o.Action == nil {
		return nil, errors.New("httpapi: Options.Engine and Options.Action are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Handler{o: o}, nil
}

// Scope returns the caller identity that keys are scoped by, so that one
// client can never read or block another's results: the JWT "sub" claim,
// else the IAM principal, else a Lambda authorizer's principalId, else
// "anonymous".
func Scope(req events.APIGatewayV2HTTPRequest) string {
	a := req.RequestContext.Authorizer
	if a == nil {
		return "anonymous"
	}
	if a.JWT != nil && a.JWT.Claims["sub"] != "" {
		return "jwt:" + a.JWT.Claims["sub"]
	}
	if a.IAM != nil && a.IAM.UserARN != "" {
		return "iam:" + a.IAM.UserARN
	}
	if a.Lambda != nil {
		if p, ok := a.Lambda["principalId"].(string); ok && p != "" {
			return "lambda:" + p
		}
	}
	return "anonymous"
}

// ScopedKey is the key stored, and sent downstream, for a client's key
// within its scope. The scope is hashed: principals may hold characters
// keys may not.
func ScopedKey(scope, clientKey string) string {
	sum := sha256.Sum256([]byte(scope))
	return "api:" + hex.EncodeToString(sum[:8]) + ":" + clientKey
}

// clientKey reads and validates the Idempotency-Key header. The draft
// makes it a structured-header string, so surrounding quotes are removed.
func clientKey(headers map[string]string) (string, error) {
	var v string
	found := false
	for k, val := range headers {
		if strings.EqualFold(k, HeaderKey) {
			v, found = val, true
			break
		}
	}
	if !found || strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("the %s header is required", HeaderKey)
	}
	v = strings.TrimSpace(v)
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

// Handle serves one request. The returned label says what happened.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, string) {
	start := h.o.Now()
	resp, label, key, attempts := h.handle(ctx, req)
	h.o.Logger.InfoContext(ctx, "request", "requestId", req.RequestContext.RequestID, "key", key, "outcome", label,
		"status", resp.StatusCode, "attempts", attempts, "duration_ms", float64(h.o.Now().Sub(start).Microseconds())/1000)
	return resp, label
}

func (h *Handler) handle(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, string, string, int) {
	ck, err := clientKey(req.Headers)
	if err != nil {
		return problem(400, "INVALID_KEY", err.Error(), 0), emf.Poison, "", 0
	}
	key := ScopedKey(Scope(req), ck)
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return problem(400, string(idem.CodeInvalidPayload), "the body is not valid base64", 0), emf.Poison, key, 0
		}
	}
	r, err := idem.NewRequest(key, body)
	if err != nil {
		return problem(400, string(idem.CodeInvalidPayload), "the body must be a JSON document: "+err.(*idem.Error).Message, 0), emf.Poison, key, 0
	}
	// The action gets the scoped key: a downstream de-duplicating on it must
	// not merge two callers who chose the same Idempotency-Key.
	ev := action.Event{Key: key, Body: json.RawMessage(body), Source: "http", ID: req.RequestContext.RequestID}
	out, _ := h.o.Engine.Do(ctx, r, func(ctx context.Context) ([]byte, error) {
		res, err := h.o.Action(ctx, ev)
		if err != nil {
			return nil, err
		}
		return action.Encode(res), nil
	})
	if out.Err == nil {
		res, err := action.Decode(out.Result)
		if err != nil {
			return problem(500, "CORRUPT_RECORD", "the stored result cannot be read", 0), emf.StoreError, key, out.Attempts
		}
		resp := events.APIGatewayV2HTTPResponse{StatusCode: res.Status, Body: string(res.Body), Headers: map[string]string{"Content-Type": contentType(res)}}
		label := emf.Executed
		if out.Replayed {
			resp.Headers["Idempotent-Replayed"] = "true"
			label = emf.Replayed
		}
		return resp, label, key, out.Attempts
	}
	status, label := status(out)
	resp := problem(status, string(out.Err.Code), out.Err.Message, out.Err.RetryAfter)
	if out.Replayed {
		resp.Headers["Idempotent-Replayed"] = "true"
	}
	return resp, label, key, out.Attempts
}

// status is the one table from engine outcomes to HTTP statuses.
func status(out idem.Outcome) (int, string) {
	switch code := out.Err.Code; {
	case out.Stored:
		// A stored permanent failure, whatever its code: the same 4xx every
		// time it is replayed.
		return 422, emf.Permanent
	case code == idem.CodeInProgress:
		return 409, emf.InProgress
	case code == idem.CodeKeyReused:
		return 422, emf.Poison
	case code == idem.CodeInvalidKey, code == idem.CodeInvalidPayload:
		return 400, emf.Poison
	case code == idem.CodeStoreMisconfigured:
		return 500, emf.StoreError
	case code == idem.CodeLeaseLost:
		return 503, emf.LeaseLost
	case code == idem.CodeStoreUnavailable:
		return 503, emf.StoreError
	default: // TRANSIENT_FAILURE, DEADLINE: released, nothing final stored
		return 503, emf.Transient
	}
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

// problem builds an application/problem+json response. The body depends
// only on its arguments, so a replayed failure is byte-identical.
func problem(status int, code, detail string, retryAfter time.Duration) events.APIGatewayV2HTTPResponse {
	body, _ := json.Marshal(problemDoc{
		Type:   "urn:oncely:problem:" + strings.ToLower(code),
		Title:  titles[status],
		Status: status,
		Detail: detail,
		Code:   code,
	})
	resp := events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/problem+json"},
		Body:       string(body),
	}
	if status == 409 || status == 503 {
		secs := int(math.Ceil(retryAfter.Seconds()))
		if secs < 1 {
			secs = 1
		}
		resp.Headers["Retry-After"] = strconv.Itoa(secs)
	}
	return resp
}

var titles = map[int]string{
	400: "Bad Request",
	409: "Conflict: the request with this key is still in flight",
	422: "Unprocessable Content",
	500: "Internal Server Error",
	503: "Service Unavailable: retry later with the same key",
}

// Package problem answers API Gateway requests with RFC 9457 problem
// details documents: the one shape of every refusal and failure the API
// adapters give (package apigw's, and the ready function's routes), so
// that a replayed failure is byte-identical to the first. It also holds
// what those adapters read of a request the same way: its body within a
// limit, a header, its declared type, and its route.
package problem

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/idem"
)

// A Problem is a refusal or a failure: the status, the code and what the
// caller is told.
type Problem struct {
	Status int
	Code   idem.Code
	Detail string
	// RetryAfter, for a 409 or a 503, is rounded up to the Retry-After
	// header's seconds, at least one.
	RetryAfter time.Duration
	// Allow, for a 405, is the Allow header: the method the route takes.
	Allow string
	// Cause, when set, is what the log line says instead of Detail (an
	// internal error the caller is not told).
	Cause string
}

// doc is an RFC 9457 problem details document.
type doc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// ContentType is every problem response's.
const ContentType = "application/problem+json"

// Response builds the application/problem+json response. The body depends
// only on the problem, so a replayed failure is byte-identical.
func (p Problem) Response() events.APIGatewayV2HTTPResponse {
	body, _ := json.Marshal(doc{
		Type:   "urn:oncely:problem:" + strings.ToLower(string(p.Code)),
		Title:  titles[p.Status],
		Status: p.Status,
		Detail: p.Detail,
		Code:   string(p.Code),
	})
	resp := events.APIGatewayV2HTTPResponse{
		StatusCode: p.Status,
		Headers:    map[string]string{"Content-Type": ContentType},
		Body:       string(body),
	}
	if p.Status == 409 || p.Status == 503 {
		secs := max(int(math.Ceil(p.RetryAfter.Seconds())), 1)
		resp.Headers["Retry-After"] = strconv.Itoa(secs)
	}
	if p.Allow != "" {
		resp.Headers["Allow"] = p.Allow
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

// DecodeBody returns the request's body bytes (base64-decoded when API
// Gateway encoded them), refusing more than limit bytes with 413 before
// decoding.
func DecodeBody(req events.APIGatewayV2HTTPRequest, limit int) ([]byte, *Problem) {
	tooLarge := func(n int) *Problem {
		return &Problem{Status: 413, Code: idem.CodeTooLarge, Detail: fmt.Sprintf("the body is %d bytes; the limit is %d", n, limit)}
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
		return nil, &Problem{Status: 400, Code: idem.CodeInvalidPayload, Detail: "the body is not valid base64"}
	}
	if len(body) > limit {
		return nil, tooLarge(len(body))
	}
	return body, nil
}

// IsJSON accepts application/json and any */*+json, with parameters.
func IsJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// Header returns a request header by name, case-insensitively, trimmed.
func Header(headers map[string]string, name string) string {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// RouteKeyOf is the route API Gateway matched.
func RouteKeyOf(req events.APIGatewayV2HTTPRequest) string {
	if req.RouteKey != "" {
		return req.RouteKey
	}
	return req.RequestContext.RouteKey
}

// MethodAndPath returns the request's method and path as the route check
// reads them: from a matched route's key (for an ANY route, with the
// request's method), or for the catch-all $default route from the request,
// without a named stage's prefix (rawPath carries it).
func MethodAndPath(req events.APIGatewayV2HTTPRequest) (method, path string) {
	switch routeKey := RouteKeyOf(req); routeKey {
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

// Package router is the Lambda entry point: it tells an SQS batch from an
// API Gateway HTTP API request, hands it to its adapter, and writes one EMF
// metrics document per invocation.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/emf"
	"github.com/oncely/oncely/internal/httpapi"
	"github.com/oncely/oncely/internal/sqsbatch"
)

// MetricsNamespace is the CloudWatch namespace of the EMF metrics.
const MetricsNamespace = "oncely"

// Router dispatches invocations.
type Router struct {
	SQS      *sqsbatch.Handler
	HTTP     *httpapi.Handler
	Function string    // the FunctionName dimension
	Metrics  io.Writer // EMF documents go here (stdout in Lambda); nil writes none
	Logger   *slog.Logger
	Now      func() time.Time
}

// shape is just enough of an event to tell the sources apart.
type shape struct {
	Records []struct {
		EventSource string `json:"eventSource"`
	} `json:"Records"`
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
	var s shape
	if err := json.Unmarshal(payload, &s); err != nil {
		return nil, fmt.Errorf("event is not JSON: %w", err)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	start := now()
	var counts emf.Counts
	source := ""
	switch {
	case len(s.Records) > 0 && s.Records[0].EventSource == "aws:sqs":
		source = "sqs"
		var ev events.SQSEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("SQS event: %w", err)
		}
		resp, results, err := r.SQS.Handle(ctx, ev)
		if err != nil {
			return nil, err
		}
		for _, res := range results {
			counts.Add(res.Outcome)
		}
		result = resp
	case s.RequestContext.HTTP.Method != "":
		source = "http"
		var req events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &req); err != nil {
			return nil, fmt.Errorf("API Gateway v2 event: %w", err)
		}
		resp, label := r.HTTP.Handle(ctx, req)
		counts.Add(label)
		result = resp
	default:
		return nil, errors.New("unsupported event: want an SQS batch or an API Gateway HTTP API (payload 2.0) request")
	}
	if r.Metrics != nil {
		if err := emf.Write(r.Metrics, MetricsNamespace, r.Function, source, &counts, now().Sub(start), now()); err != nil {
			r.logger().WarnContext(ctx, "metrics not written", "error", err.Error())
		}
	}
	return result, nil
}

func (r *Router) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

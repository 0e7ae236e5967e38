package outside_test

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"example.com/outside/mapstore"
	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
)

// The public API Gateway adapter over this module's own store: a retry
// replays the first answer, marked, and the handler runs once; another
// caller with the same key is another key.
func TestAPIGatewayFromOutside(t *testing.T) {
	runs := 0
	h := apigw.WrapV2(newEngine(t, mapstore.New()), func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		key, _ := oncely.KeyFrom(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"key":"` + key + `"}`}, nil
	}, apigw.Options{})
	request := func(sub string) events.APIGatewayV2HTTPRequest {
		req := events.APIGatewayV2HTTPRequest{Headers: map[string]string{"Idempotency-Key": "order-7f3a9c21"}, Body: `{"item":"book"}`}
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}}}
		return req
	}
	first, _ := h(context.Background(), request("alice"))
	again, _ := h(context.Background(), request("alice"))
	other, _ := h(context.Background(), request("bob"))
	if first.StatusCode != 201 || again.Body != first.Body || again.Headers[apigw.HeaderReplayed] != "true" {
		t.Errorf("first %+v, retry %+v; want the retry to replay the first, marked", first, again)
	}
	if other.StatusCode != 201 || other.Body == first.Body || runs != 2 {
		t.Errorf("another caller got %+v after %d runs; want its own answer (two runs in all)", other, runs)
	}
}

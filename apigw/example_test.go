package apigw_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/oncelytest"
)

// A team's own handler, made idempotent for lambda.Start. A deployed
// function passes the DynamoDB store; a test, the in-memory one.
func ExampleWrapV2() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		panic(err)
	}
	charges := 0
	charge := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		charges++
		return events.APIGatewayV2HTTPResponse{
			StatusCode: 201,
			Headers:    map[string]string{"Location": "/charges/ch_1"},
			Body:       fmt.Sprintf(`{"charge":"ch_1","n":%d}`, charges),
		}, nil
	}
	handler := apigw.WrapV2(engine, charge, apigw.Options{})
	// lambda.Start(handler)

	req := events.APIGatewayV2HTTPRequest{
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": "charge-7f3a9c21"},
		Body:    `{"amount":1200,"currency":"EUR"}`,
	}
	for range 2 { // the client's retry
		resp, _ := handler(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Headers["Location"], resp.Headers["Idempotent-Replayed"], resp.Body)
	}
	req.Headers["idempotency-key"] = "x"
	resp, _ := handler(context.Background(), req)
	fmt.Println(resp.StatusCode, resp.Headers["Content-Type"])
	fmt.Println("charges:", charges)
	// Output:
	// 201 /charges/ch_1  {"charge":"ch_1","n":1}
	// 201 /charges/ch_1 true {"charge":"ch_1","n":1}
	// 400 application/problem+json
	// charges: 1
}

// NewV2 gives each request's Result (for a log line or a metric), and lets
// the handler return writes for the store to commit with its response.
func ExampleNewV2() {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		panic(err)
	}
	h, err := apigw.NewV2(engine, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		key, _ := oncely.KeyFrom(ctx) // the caller's scoped key, to pass downstream
		fmt.Println("running for", key)
		return events.APIGatewayV2HTTPResponse{StatusCode: 202, Body: `{"queued":true}`}, nil, nil
	}, apigw.Options{
		OnReplay: func(ctx context.Context, req events.APIGatewayV2HTTPRequest, resp *events.APIGatewayV2HTTPResponse) {
			resp.Headers["X-Cache"] = "replay"
		},
	})
	if err != nil {
		panic(err)
	}
	tenant := &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "tenant-a"}},
	}
	req := events.APIGatewayV2HTTPRequest{
		Headers:        map[string]string{"idempotency-key": "order-7f3a9c21"},
		Body:           `{"order":42}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{Authorizer: tenant},
	}
	for range 2 {
		resp, res := h.Handle(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Body, resp.Headers["X-Cache"], res.Label)
	}
	req.Body = `{"order":43}` // the same key for another request
	resp, res := h.Handle(context.Background(), req)
	fmt.Println(resp.StatusCode, res.Code)
	// Output:
	// running for api:cc83083ab1c48e9c:order-7f3a9c21
	// 202 {"queued":true}  executed
	// 202 {"queued":true} replay replayed
	// 422 KEY_REUSED
}

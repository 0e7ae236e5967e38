package apigw_test

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/oncelytest"
)

// OnReplay's context carries the scoped key, as the handler's does: a hook
// logs or counts the key the record is stored under.
func TestOnReplayGetsTheScopedKey(t *testing.T) {
	e, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inHandler, inHook string
	h := apigw.WrapV2(e, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		inHandler, _ = oncely.KeyFrom(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"ok":true}`}, nil
	}, apigw.Options{OnReplay: func(ctx context.Context, _ events.APIGatewayV2HTTPRequest, _ *events.APIGatewayV2HTTPResponse) {
		inHook, _ = oncely.KeyFrom(ctx)
	}})
	req := events.APIGatewayV2HTTPRequest{Headers: map[string]string{"idempotency-key": "order-7f3a9c21"}, Body: `{"item":"book"}`}
	for range 2 {
		if _, err := h(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	want := apigw.ScopedKey("anonymous", "order-7f3a9c21")
	if inHandler != want || inHook != want {
		t.Errorf("the handler saw key %q and OnReplay %q; want both %q", inHandler, inHook, want)
	}
}

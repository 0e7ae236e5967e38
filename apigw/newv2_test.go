package apigw_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/oncelytest"
)

// writes are effectStore's effects: items to append to its ledger.
type writes []string

func (w writes) Len() int { return len(w) }

// effectStore is the in-memory store that also commits writes with a
// record's completion, under one lock: the completion and the writes
// happen together or not at all.
type effectStore struct {
	*oncelytest.Store
	mu     sync.Mutex
	ledger []string
}

var _ driver.EffectStore = (*effectStore)(nil)

func (s *effectStore) CompleteWithEffects(ctx context.Context, f driver.Finish, effects driver.Effects) error {
	w, ok := effects.(writes)
	if !ok {
		return &driver.ClassifiedError{Class: driver.ClassPermanent, Code: driver.CodeInvalidEffects, Err: fmt.Errorf("effects of type %T", effects)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Complete(ctx, f); err != nil {
		return err
	}
	s.ledger = append(s.ledger, w...)
	return nil
}

func (s *effectStore) items() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ledger)
}

// TestEffectsAreCommittedWithTheResponse: NewV2's effects reach the store
// with the stored response, once; a replay commits nothing more.
func TestEffectsAreCommittedWithTheResponse(t *testing.T) {
	store := &effectStore{Store: oncelytest.NewStore()}
	engine, err := oncely.New(store, oncely.Options{Retry: quickRetry, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := apigw.NewV2(engine, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		key, _ := oncely.KeyFrom(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"booked":true}`}, writes{"ledger:" + key}, nil
	}, apigw.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, _ := h.Handle(context.Background(), request())
		if resp.StatusCode != 201 || resp.Body != `{"booked":true}` {
			t.Fatalf("request %d: %d %s; want 201", i+1, resp.StatusCode, resp.Body)
		}
	}
	want := []string{"ledger:" + scopedKey(t, request(), clientKey)}
	if got := store.items(); !slices.Equal(got, want) {
		t.Errorf("ledger %q; want %q", got, want)
	}
}

// TestEffectsOfAnUnstoredResponseAreNotCommitted: a response that is not
// stored commits none of its writes.
func TestEffectsOfAnUnstoredResponseAreNotCommitted(t *testing.T) {
	store := &effectStore{Store: oncelytest.NewStore()}
	engine, err := oncely.New(store, oncely.Options{Retry: quickRetry, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := apigw.NewV2(engine, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 503, Body: "busy"}, writes{"ledger:never"}, nil
	}, apigw.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := h.Handle(context.Background(), request()); resp.StatusCode != 503 || resp.Body != "busy" {
		t.Errorf("got %d %s; want the handler's 503", resp.StatusCode, resp.Body)
	}
	if got := store.items(); len(got) != 0 {
		t.Errorf("ledger %q; want nothing", got)
	}
}

// TestEffectsOnAStoreThatCannotCommitThemFail: effects are never dropped:
// a store that cannot commit them fails the request, permanently.
func TestEffectsOnAStoreThatCannotCommitThemFail(t *testing.T) {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Retry: quickRetry, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := apigw.NewV2(engine, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 201}, writes{"ledger:lost"}, nil
	}, apigw.Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := h.Handle(context.Background(), request())
	checkProblem(t, resp, 422, "INVALID_EFFECTS")
}

func TestNewV2AndWrapV2RefuseMissingParts(t *testing.T) {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
	if err != nil {
		t.Fatal(err)
	}
	work := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, oncely.Effects, error) {
		return events.APIGatewayV2HTTPResponse{}, nil, nil
	}
	tests := []struct {
		name   string
		engine *oncely.Engine
		work   apigw.WorkV2
		fn     handlerFunc
	}{
		{"a nil engine", nil, work, created},
		{"a nil handler", engine, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := apigw.NewV2(tt.engine, tt.work, apigw.Options{})
			if err == nil || h != nil {
				t.Fatalf("NewV2 = %v, %v; want an error", h, err)
			}
			defer func() {
				if r := recover(); fmt.Sprint(r) != err.Error() {
					t.Errorf("WrapV2 panicked with %v; want NewV2's error %q", r, err)
				}
			}()
			apigw.WrapV2(tt.engine, tt.fn, apigw.Options{})
		})
	}
}

// TestWrapV2NeverReturnsAnError: what lambda.Start gets answers every
// refusal and failure as a response.
func TestWrapV2NeverReturnsAnError(t *testing.T) {
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Retry: oncely.RetryPolicy{AttemptsPerDelivery: 1}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fn := apigw.WrapV2(engine, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{}, oncely.Transient(fmt.Errorf("dial %s", leakyURL))
	}, apigw.Options{})
	for _, req := range []events.APIGatewayV2HTTPRequest{request(), request(noHeader("idempotency-key"))} {
		resp, err := fn(context.Background(), req)
		if err != nil || resp.StatusCode < 400 {
			t.Errorf("got %d, %v; want a problem response and no error", resp.StatusCode, err)
		}
		checkNoLeak(t, resp)
	}
}

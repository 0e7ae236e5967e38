package apigw_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
	"github.com/oncely/oncely/oncelytest"
)

func TestStoreStatus(t *testing.T) {
	stored := []int{200, 201, 202, 204, 299, 300, 301, 303, 304, 399, 400, 401, 403, 404, 410, 422, 499}
	notStored := []int{0, 100, 199, 408, 409, 425, 429, 500, 502, 503, 504, 599, 600}
	for _, s := range stored {
		if !apigw.StoreStatus(s) {
			t.Errorf("StoreStatus(%d) = false; want true", s)
		}
	}
	for _, s := range notStored {
		if apigw.StoreStatus(s) {
			t.Errorf("StoreStatus(%d) = true; want false", s)
		}
	}
}

// numbered answers status with a body and headers naming its run.
func numbered(status int, runs *atomic.Int64) handlerFunc {
	return func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		n := strconv.FormatInt(runs.Add(1), 10)
		return events.APIGatewayV2HTTPResponse{StatusCode: status, Body: `{"run":` + n + `}`,
			Headers: map[string]string{"Content-Type": "application/json", "Retry-After": "7", "Content-Length": "9", "X-Run": n}}, nil
	}
}

// TestResponsesNotStoredAreReturnedAsTheyAreAndReleased: a status that
// asks for a retry (408, 409, 425, 429, 5xx) is returned exactly as the
// handler gave it, not marked replayed; the key is released, so the next
// request runs the handler again, and the engine's in-call retry does not
// run it twice in one request.
func TestResponsesNotStoredAreReturnedAsTheyAreAndReleased(t *testing.T) {
	for _, status := range []int{408, 409, 425, 429, 500, 502, 503, 504} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var runs atomic.Int64
			fn := numbered(status, &runs)
			// The engine's default three attempts a request.
			f := newFixture(t, oncely.Options{}, apigw.Options{}, fn)
			for i := int64(1); i <= 3; i++ {
				resp, res := f.handle(t, request())
				want, _ := numbered(status, new(atomic.Int64))(context.Background(), request())
				want.Body, want.Headers["X-Run"] = `{"run":`+strconv.FormatInt(i, 10)+`}`, strconv.FormatInt(i, 10)
				if diff := cmp.Diff(want, resp); diff != "" {
					t.Errorf("request %d (-want +got):\n%s", i, diff)
				}
				if res.Replayed {
					t.Errorf("request %d: result %+v; want not replayed", i, res)
				}
				if n := f.calls.Load(); n != i {
					t.Fatalf("after request %d the handler ran %d times; want %d: once a request", i, n, i)
				}
			}
		})
	}
}

// TestResponsesStoredByDefault: 2xx, 3xx and 4xx but the four are replayed.
func TestResponsesStoredByDefault(t *testing.T) {
	for _, status := range []int{200, 201, 204, 400, 403, 404, 422} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var runs atomic.Int64
			f := newFixture(t, oncely.Options{}, apigw.Options{}, numbered(status, &runs))
			first, _ := f.handle(t, request())
			replay, _ := f.handle(t, request())
			if replay.StatusCode != status || replay.Body != `{"run":1}` || replay.Headers["X-Run"] != "1" || replay.Headers[apigw.HeaderReplayed] != "true" {
				t.Errorf("replay %d %s %v; want run 1's %d, replayed", replay.StatusCode, replay.Body, replay.Headers, status)
			}
			if _, ok := first.Headers["Content-Length"]; ok {
				t.Errorf("a stored response keeps Content-Length: %v", first.Headers)
			}
			if n := f.calls.Load(); n != 1 {
				t.Errorf("handler runs %d; want 1", n)
			}
		})
	}
}

// TestOptionsStoreOverridesStoreStatus: Options.Store decides alone.
func TestOptionsStoreOverridesStoreStatus(t *testing.T) {
	tests := []struct {
		name   string
		store  func(int) bool
		status int
		stored bool
	}{
		{"only 201: 201 stored", func(s int) bool { return s == 201 }, 201, true},
		{"only 201: 200 not", func(s int) bool { return s == 201 }, 200, false},
		{"only 201: 404 not", func(s int) bool { return s == 201 }, 404, false},
		{"everything: 503 stored", func(int) bool { return true }, 503, true},
		{"everything: 429 stored", func(int) bool { return true }, 429, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			f := newFixture(t, oncely.Options{}, apigw.Options{Store: tt.store}, numbered(tt.status, &runs))
			f.handle(t, request())
			second, _ := f.handle(t, request())
			wantRuns, wantBody := int64(2), `{"run":2}`
			if tt.stored {
				wantRuns, wantBody = 1, `{"run":1}`
			}
			if second.StatusCode != tt.status || second.Body != wantBody || (second.Headers[apigw.HeaderReplayed] == "true") != tt.stored {
				t.Errorf("second request: %d %s %v; want %d %s, replayed %v", second.StatusCode, second.Body, second.Headers, tt.status, wantBody, tt.stored)
			}
			if n := f.calls.Load(); n != wantRuns {
				t.Errorf("handler runs %d; want %d", n, wantRuns)
			}
		})
	}
}

// A redirect after the side effect is the answer (303 See Other after a
// POST): stored and replayed, the handler run once. A response without a
// status is a 200, stored as one.
func TestRedirectsAndResponsesWithoutAStatusAreStored(t *testing.T) {
	for _, status := range []int{303, 0} {
		e, err := oncely.New(oncelytest.NewStore(), oncely.Options{})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		h := apigw.WrapV2(e, func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			runs++
			return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{"Location": "/orders/o-1"}}, nil
		}, apigw.Options{})
		req := events.APIGatewayV2HTTPRequest{Headers: map[string]string{"Idempotency-Key": "order-7f3a9c21"}, Body: `{"item":"book"}`}
		var last events.APIGatewayV2HTTPResponse
		for range 2 {
			if last, err = h(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		}
		want := max(status, 200)
		if runs != 1 || last.StatusCode != want || last.Headers["Location"] != "/orders/o-1" || last.Headers[apigw.HeaderReplayed] != "true" {
			t.Errorf("status %d: %d runs, replay %+v; want one run and a replayed %d with its Location", status, runs, last, want)
		}
	}
}

package rie

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The emulator answers a runtime that failed to start with a bare 502.
// Invoke must turn it into a function error in Lambda's shape, never an
// empty body, which an event source mapping reads as "all succeeded".
func TestInvokeTurnsABare502IntoAFunctionError(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusInternalServerError} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		e := &Emulator{URL: srv.URL, client: srv.Client()}
		body, err := e.Invoke(context.Background(), []byte(`{}`))
		srv.Close()
		if err != nil {
			t.Fatalf("%d: Invoke: %v", status, err)
		}
		var fe struct{ ErrorType, ErrorMessage string }
		if json.Unmarshal(body, &fe) != nil || fe.ErrorType == "" {
			t.Errorf("%d with no body: Invoke returned %q; want a function error", status, body)
		}
	}
	// A reply with a body is passed on as it is.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"batchItemFailures":[]}`)) }))
	defer srv.Close()
	e := &Emulator{URL: srv.URL, client: srv.Client()}
	if body, err := e.Invoke(context.Background(), nil); err != nil || string(body) != `{"batchItemFailures":[]}` {
		t.Errorf("Invoke = %q, %v; want the reply unchanged", body, err)
	}
}

// In the managed-instances mode the emulator refuses an invoke while no
// runtime worker is idle (a moment after each answer): InvokeAs sends it
// again, with the request id the caller chose.
func TestInvokeAsRetriesWhileNoWorkerIsIdle(t *testing.T) {
	var refused atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Amzn-RequestId") != "req-7" {
			t.Errorf("request id %q; want req-7", r.Header.Get("X-Amzn-RequestId"))
		}
		if refused.Add(1) <= 2 {
			w.Header().Set("Error-Type", "Runtime.Unavailable")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"errorType":"Runtime.Unavailable","errorMessage":"no idle runtimes"}`))
			return
		}
		_, _ = w.Write([]byte(`{"batchItemFailures":[]}`))
	}))
	defer srv.Close()
	e := &Emulator{URL: srv.URL, client: srv.Client(), slots: make(chan struct{}, 2), done: make(chan struct{})}
	body, err := e.InvokeAs(context.Background(), "req-7", []byte(`{}`))
	if err != nil || string(body) != `{"batchItemFailures":[]}` || refused.Load() != 3 {
		t.Errorf("InvokeAs = %q, %v after %d sends; want the answer to the third", body, err, refused.Load())
	}
	// The default mode passes the refusal on: it never happens there.
	refused.Store(0)
	e = &Emulator{URL: srv.URL, client: srv.Client()}
	if body, _ := e.InvokeAs(context.Background(), "req-7", nil); !strings.Contains(string(body), "no idle runtimes") {
		t.Errorf("default mode: %q; want the refusal itself", body)
	}
}

func TestMaxConcurrencyReadsTheLastSetting(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want int
	}{
		{nil, 0},
		{[]string{"AWS_LAMBDA_MAX_CONCURRENCY=8"}, 8},
		{[]string{"AWS_LAMBDA_MAX_CONCURRENCY=8", "AWS_LAMBDA_MAX_CONCURRENCY=2"}, 2},
		{[]string{"AWS_LAMBDA_MAX_CONCURRENCY=lots"}, 1},
	} {
		if got := MaxConcurrency(tt.env); got != tt.want {
			t.Errorf("MaxConcurrency(%q) = %d; want %d", tt.env, got, tt.want)
		}
	}
}

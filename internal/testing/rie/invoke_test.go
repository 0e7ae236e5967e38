package rie

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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

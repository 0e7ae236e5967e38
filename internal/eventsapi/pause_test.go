package eventsapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// TestARetryThatIgnoresRetryAfterGets409WhileTheReceiverWorks: the
// function's POST times out once written; the caller is told to wait (503,
// Retry-After of at least the pause) but retries at once. The receiver is
// still on the first request, so the retry must not POST a second time:
// the record's hold-off answers it 409 with the time left. Before holds,
// the release made the key claimable at once and the retry POSTed again.
func TestARetryThatIgnoresRetryAfterGets409WhileTheReceiverWorks(t *testing.T) {
	const pause = 3 * time.Second
	var posts atomic.Int64
	working := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		select { // still working on it, long past the function's timeout
		case <-working:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer receiver.Close()
	defer close(working) // before Close: the handler must return
	// A second for the request: on a loaded machine the dial and the write
	// must end well before it, or the failure is "not sent".
	n := notify.New(receiver.URL, time.Second, notify.Classifier{})
	engine, err := idem.New(idem.Options{Store: memstore.New(), Lease: time.Minute, SentPause: pause, Logger: slog.New(slog.DiscardHandler),
		Retry: idem.RetryPolicy{AttemptsPerDelivery: 3, Base: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := eventsapi.New(eventsapi.Options{Engine: engineref.Wrap(engine).(*oncely.Engine), Action: n.Do, MaxBodyBytes: 1024, JWTIssuer: issuer, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, _ := h.Handle(ctx, request())
	if secs, err := strconv.Atoi(first.Headers["Retry-After"]); first.StatusCode != 503 || err != nil || time.Duration(secs)*time.Second < pause {
		t.Fatalf("first request: %d Retry-After %q; want 503 asking for at least the %v pause", first.StatusCode, first.Headers["Retry-After"], pause)
	}
	retry, _ := h.Handle(ctx, request()) // at once, ignoring Retry-After
	if secs, err := strconv.Atoi(retry.Headers["Retry-After"]); retry.StatusCode != 409 || err != nil || secs < 1 || time.Duration(secs)*time.Second > pause {
		t.Errorf("retry at once: %d Retry-After %q %s; want 409 with the hold-off's time left (at most %v)", retry.StatusCode, retry.Headers["Retry-After"], retry.Body, pause)
	}
	if got := posts.Load(); got != 1 {
		t.Errorf("the receiver got %d POSTs; want 1: the retry came while it still worked on the first", got)
	}
}

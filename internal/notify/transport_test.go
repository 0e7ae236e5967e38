package notify_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// countingHandler counts the requests it read whole, per Idempotency-Key,
// and then does what its test wants with the connection.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
	protos []int
	then   func(w http.ResponseWriter, r *http.Request)
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body) // the whole request, as a receiver would read it
	h.mu.Lock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[r.Header.Get("Idempotency-Key")]++
	h.protos = append(h.protos, r.ProtoMajor)
	h.mu.Unlock()
	h.then(w, r)
}

func (h *countingHandler) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[key]
}

func (h *countingHandler) protocols() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.protos...)
}

// quiet keeps a test server's expected complaints (a TLS handshake refused
// by the client, a panicking handler) out of the test's output.
func quiet(srv *httptest.Server) { srv.Config.ErrorLog = log.New(io.Discard, "", 0) }

// trust makes n's client verify srv's certificate (and speak HTTP/2 to it
// when srv offers it).
func trust(t *testing.T, n *notify.Notifier, srv *httptest.Server) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tr, ok := n.Client.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("notify.New's transport is %T; want *http.Transport", n.Client.Transport)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool}
}

// deliver runs one delivery of e through idem's engine, over the in-memory
// store, as the adapters do (3 attempts per delivery, backoff not slept),
// and returns the outcome and the record the store keeps.
func deliver(t *testing.T, n *notify.Notifier, e action.Event) (idem.Outcome, idem.Record) {
	t.Helper()
	return deliverIn(context.Background(), t, n, e)
}

// deliverIn is deliver under ctx (a test's httptrace hooks, say).
func deliverIn(ctx context.Context, t *testing.T, n *notify.Notifier, e action.Event) (idem.Outcome, idem.Record) {
	t.Helper()
	store := memstore.New()
	engine, err := idem.New(idem.Options{
		Store:  store,
		Retry:  idem.RetryPolicy{AttemptsPerDelivery: 3, Base: time.Millisecond, Max: time.Second},
		Sleep:  func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	req, err := idem.NewRequest(e.Key, e.Body)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline as Lambda gives one, generous for a loaded machine.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out := engine.DoWork(ctx, req, action.Work(n.Do, e))
	rec, ok, err := store.Get(context.Background(), e.Key, time.Now())
	if err != nil || !ok {
		t.Fatalf("no record for %s (%v)", e.Key, err)
	}
	return out, rec
}

// Every error http.Client.Do returns means no complete reply came: it is
// transient whatever its type (never permanent, never outcome unknown),
// so the engine releases the key and the event is retried on a later
// delivery; only a request that was not written is tried again in the
// same delivery. The record must say so, not just the error's class.
func TestTransportFailuresAreReleasedNotStoredAsPermanent(t *testing.T) {
	tests := []struct {
		name string
		// start returns the receiver and the Notifier that delivers to it.
		start func(t *testing.T) (*countingHandler, *notify.Notifier)
		// prime, when set, is delivered first on the same client (a
		// connection to reuse).
		prime bool
		// h2: the receiver must have been reached over HTTP/2.
		h2 bool
		// sent: the request was written, so the delivery's attempts end
		// with the first (one POST); otherwise all three are tried.
		sent     bool
		calls    int // the action's executions in the delivery
		received int // requests the receiver read whole
		cause    string
	}{
		{
			name: "certificate that does not verify",
			start: func(t *testing.T) (*countingHandler, *notify.Notifier) {
				h := &countingHandler{then: func(w http.ResponseWriter, r *http.Request) {}}
				srv := httptest.NewUnstartedServer(h)
				quiet(srv)
				srv.StartTLS()
				t.Cleanup(srv.Close)
				// The client does not know the test CA: verification fails
				// in the handshake, before anything is sent.
				return h, notify.New(srv.URL+"/hooks/secret-path?token=s3cret", 10*time.Second, notify.Classifier{})
			},
			sent: false, calls: 3, received: 0, cause: "certificate",
		},
		{
			name: "HTTP/2 stream reset after the request was read",
			start: func(t *testing.T) (*countingHandler, *notify.Notifier) {
				// A handler that panics with ErrAbortHandler under HTTP/2
				// makes the server reset the stream (RST_STREAM).
				h := &countingHandler{then: func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }}
				srv := httptest.NewUnstartedServer(h)
				srv.EnableHTTP2 = true
				quiet(srv)
				srv.StartTLS()
				t.Cleanup(srv.Close)
				n := notify.New(srv.URL+"/hooks/secret-path?token=s3cret", 10*time.Second, notify.Classifier{})
				trust(t, n, srv)
				return h, n
			},
			h2: true, sent: true, calls: 1, received: 1, cause: "stream error",
		},
		{
			name: "connection closed after the request was read",
			start: func(t *testing.T) (*countingHandler, *notify.Notifier) {
				h := &countingHandler{then: hijackAndClose}
				srv := httptest.NewUnstartedServer(h)
				quiet(srv)
				srv.Start()
				t.Cleanup(srv.Close)
				return h, notify.New(srv.URL+"/hooks/secret-path?token=s3cret", 10*time.Second, notify.Classifier{})
			},
			sent: true, calls: 1, received: 1, cause: "EOF",
		},
		{
			// On a reused connection, net/http replays a POST that carries
			// an Idempotency-Key after such a close: a second POST of the
			// same attempt, which notify refuses.
			name: "reused connection closed after the request was read",
			start: func(t *testing.T) (*countingHandler, *notify.Notifier) {
				h := &countingHandler{}
				h.then = func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get("Idempotency-Key") == primeKey {
						return // 200, and the connection stays open
					}
					hijackAndClose(w, r)
				}
				srv := httptest.NewUnstartedServer(h)
				quiet(srv)
				srv.Start()
				t.Cleanup(srv.Close)
				return h, notify.New(srv.URL+"/hooks/secret-path?token=s3cret", 10*time.Second, notify.Classifier{})
			},
			prime: true, sent: true, calls: 1, received: 1, cause: "not sent again",
		},
		{
			name: "malformed response",
			start: func(t *testing.T) (*countingHandler, *notify.Notifier) {
				h := &countingHandler{then: func(w http.ResponseWriter, r *http.Request) {
					c, buf, err := http.NewResponseController(w).Hijack()
					if err != nil {
						panic(err)
					}
					_, _ = buf.WriteString("HTTP/1.1 two hundred OK\r\n\r\n")
					_ = buf.Flush()
					c.Close()
				}}
				srv := httptest.NewUnstartedServer(h)
				quiet(srv)
				srv.Start()
				t.Cleanup(srv.Close)
				return h, notify.New(srv.URL+"/hooks/secret-path?token=s3cret", 10*time.Second, notify.Classifier{})
			},
			sent: true, calls: 1, received: 1, cause: "malformed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n := tt.start(t)
			if tt.prime {
				prime := ev
				prime.Key = primeKey
				if _, err := n.Do(context.Background(), prime); err != nil {
					t.Fatalf("priming delivery: %v", err)
				}
			}
			out, rec := deliver(t, n, ev)
			if out.Err == nil || out.Err.Code != idem.CodeTransientFailure || !out.Err.Retryable || out.Stored {
				t.Fatalf("outcome %+v (err %+v); want released: TRANSIENT_FAILURE, retryable, nothing final stored", out, out.Err)
			}
			if rec.Status != idem.StatusFailed || !rec.Retryable || rec.ErrorCode != idem.CodeTransientFailure {
				t.Errorf("record %s retryable=%v code %s; want FAILED, retryable, TRANSIENT_FAILURE (not PERMANENT_FAILURE, not OUTCOME_UNKNOWN)", rec.Status, rec.Retryable, rec.ErrorCode)
			}
			if out.Calls != tt.calls {
				t.Errorf("the delivery ran the action %d times; want %d (sent=%v: a request that may have reached the receiver ends the delivery's attempts)", out.Calls, tt.calls, tt.sent)
			}
			if got := h.count(ev.Key); got != tt.received {
				t.Errorf("the receiver read %d POSTs of the delivery; want %d", got, tt.received)
			}
			if tt.h2 {
				if p := h.protocols(); len(p) == 0 || p[0] != 2 {
					t.Errorf("protocols %v; want HTTP/2", p)
				}
			}
			// The detail the engine logs: whether the request was written,
			// the cause, and the downstream by scheme and host only.
			var ce *idem.ClassifiedError
			detail := out.Err.Detail()
			if !errors.As(out.Err, &ce) || ce.Sent != tt.sent {
				t.Errorf("error %v: Sent %v; want %v", out.Err.Err, ce != nil && ce.Sent, tt.sent)
			}
			wrote := "was not sent"
			if tt.sent {
				wrote = "was sent"
			}
			if !strings.Contains(detail, wrote) || !strings.Contains(detail, tt.cause) {
				t.Errorf("detail %q; want it to say the request %s, and the cause %q", detail, wrote, tt.cause)
			}
			if strings.Contains(detail, "secret-path") || strings.Contains(detail, "s3cret") {
				t.Errorf("detail %q holds the URL's path or query; want scheme and host only", detail)
			}
		})
	}
}

const primeKey = "evt:prime:notify"

// hijackAndClose closes the connection without a reply.
func hijackAndClose(w http.ResponseWriter, r *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	c.Close()
}

// A dial nobody answers is not sent: the delivery may try again at once.
func TestRefusedDialIsRetriedInTheSameDelivery(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	out, rec := deliver(t, notify.New("http://"+addr, 10*time.Second, notify.Classifier{}), ev)
	if out.Calls != 3 || rec.Status != idem.StatusFailed || !rec.Retryable || rec.ErrorCode != idem.CodeTransientFailure {
		t.Errorf("calls %d, record %s retryable=%v %s; want 3 in-call attempts, then released", out.Calls, rec.Status, rec.Retryable, rec.ErrorCode)
	}
	if d := out.Err.Detail(); !strings.Contains(d, "was not sent") {
		t.Errorf("detail %q; want it to say the request was not sent", d)
	}
}

// A receiver slower than the request's timeout has the request: the
// delivery ends with that one POST, over HTTP/1 and HTTP/2 (where the
// write may report after the timeout: "may have been sent" counts).
func TestTimedOutRequestEndsTheDelivery(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			release := make(chan struct{})
			h := &countingHandler{then: func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Idempotency-Key") == primeKey {
					return
				}
				select {
				case <-r.Context().Done():
				case <-release:
				}
			}}
			srv := httptest.NewUnstartedServer(h)
			quiet(srv)
			srv.EnableHTTP2 = h2
			if h2 {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) })
			n := notify.New(srv.URL, 500*time.Millisecond, notify.Classifier{})
			if h2 {
				trust(t, n, srv)
			}
			// The connection (and its TLS handshake) is made first, so that
			// on a loaded machine the timeout cuts the wait for the reply,
			// not the dial.
			prime := ev
			prime.Key = primeKey
			if _, err := n.Do(context.Background(), prime); err != nil {
				t.Fatalf("priming delivery: %v", err)
			}
			out, rec := deliver(t, n, ev)
			if out.Calls != 1 || h.count(ev.Key) != 1 {
				t.Errorf("calls %d, POSTs received %d; want 1 and 1", out.Calls, h.count(ev.Key))
			}
			if h2 {
				if p := h.protocols(); len(p) == 0 || p[0] != 2 {
					t.Errorf("protocols %v; want HTTP/2", p)
				}
			}
			if rec.Status != idem.StatusFailed || !rec.Retryable || rec.ErrorCode != idem.CodeTransientFailure {
				t.Errorf("record %s retryable=%v %s; want released", rec.Status, rec.Retryable, rec.ErrorCode)
			}
			if d := out.Err.Detail(); !strings.Contains(d, "been sent") && !strings.Contains(d, "was sent") || !strings.Contains(d, "deadline exceeded") {
				t.Errorf("detail %q; want it to say the request was (or may have been) sent and timed out", d)
			}
		})
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

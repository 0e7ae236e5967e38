package main

import (
	"bufio"
	"cmp"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// roundTripFunc records what the gate forwards.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An answer the gate forwards can be sent again: net/http resends a POST on
// a fresh connection only when nothing of it was written to a pooled one
// that turned out closed, and only with GetBody. The proxy's request has
// none, so without the gate's buffer such an answer was lost (a 502 from
// the proxy, which aws-lambda-go treats as fatal).
func TestExitGateForwardsAnswersThatCanBeResent(t *testing.T) {
	const answer = `{"batchItemFailures":[]}`
	var got *http.Request
	g := &exitGate{abandoned: func() int { return 0 }, logger: slog.New(slog.DiscardHandler),
		base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			got = r
			return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody}, nil
		})}
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9001/2018-06-01/runtime/invocation/id-1/response", io.NopCloser(strings.NewReader(answer)))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // as httputil.ReverseProxy sends it
	if _, err := g.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.GetBody == nil {
		t.Fatalf("forwarded request without GetBody; want one net/http can resend")
	}
	for i := range 2 {
		body, err := got.GetBody()
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(body); string(b) != answer {
			t.Errorf("GetBody %d gave %q; want %q", i, b, answer)
		}
	}
	if b, _ := io.ReadAll(got.Body); string(b) != answer {
		t.Errorf("body %q; want %q", b, answer)
	}
}

// The decision: the process ends only when a bound is set, every
// invocation handed out is answered, and more abandoned actions run than
// the bound.
func TestExitGateExitDue(t *testing.T) {
	for _, tt := range []struct {
		name                        string
		bound, unanswered, abandons int
		want                        bool
	}{
		{"no bound", 0, 0, 100, false},
		{"at the bound", 4, 0, 4, false},
		{"past the bound, all answered", 4, 0, 5, true},
		{"past the bound, one unanswered", 4, 1, 5, false},
		{"past the bound, several unanswered", 4, 3, 50, false},
		{"under the bound", 4, 0, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &exitGate{bound: tt.bound, abandoned: func() int { return tt.abandons }}
			g.unanswered.Store(int64(tt.unanswered))
			if got := g.exitDue(); got != tt.want {
				t.Errorf("exitDue() with bound %d, %d unanswered, %d abandoned = %v; want %v", tt.bound, tt.unanswered, tt.abandons, got, tt.want)
			}
		})
	}
}

// fakeRuntime answers the gate's calls as the Runtime API does: a next
// request with 200 (or nextStatus), an answer with 202 (or answerStatus).
type fakeRuntime struct {
	nextStatus, answerStatus int
	calls                    []string
}

func (f *fakeRuntime) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls = append(f.calls, r.Method+" "+r.URL.Path)
	status := cmp.Or(f.nextStatus, http.StatusOK)
	if r.Method == http.MethodPost {
		status = cmp.Or(f.answerStatus, http.StatusAccepted)
	}
	return &http.Response{StatusCode: status, Body: http.NoBody}, nil
}

const (
	runtimeNext = "http://127.0.0.1:9001/2018-06-01/runtime/invocation/next"
	runtimeBase = "http://127.0.0.1:9001/2018-06-01/runtime/invocation/"
)

func runtimeCall(t *testing.T, g *exitGate, method, url string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{}`)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// The gate counts an invocation as unanswered from the next request that
// handed it out (200) until the Runtime API accepted its response or its
// error (202); a refused call changes nothing.
func TestExitGateCountsUnansweredInvocations(t *testing.T) {
	rt := &fakeRuntime{}
	g := &exitGate{abandoned: func() int { return 0 }, logger: slog.New(slog.DiscardHandler), base: rt}
	step := func(method, url string, want int64) {
		t.Helper()
		runtimeCall(t, g, method, url)
		if got := g.unanswered.Load(); got != want {
			t.Errorf("after %s %s: %d unanswered; want %d", method, url, got, want)
		}
	}
	step(http.MethodGet, runtimeNext, 1)
	step(http.MethodGet, runtimeNext, 2) // a second invoke loop
	step(http.MethodPost, runtimeBase+"id-1/response", 1)
	step(http.MethodPost, runtimeBase+"id-2/error", 0)
	step(http.MethodPost, "http://127.0.0.1:9001/2018-06-01/runtime/init/error", 0)
	rt.nextStatus = http.StatusInternalServerError
	step(http.MethodGet, runtimeNext, 0) // no invocation handed out
	rt.nextStatus = 0
	step(http.MethodGet, runtimeNext, 1)
	rt.answerStatus = http.StatusBadRequest
	step(http.MethodPost, runtimeBase+"id-3/response", 1) // not accepted: still unanswered
}

// Past the bound, the gate exits at the next request that finds every
// invocation answered, once, after writing that request to the Runtime
// API on a connection of its own; not while an invocation is unanswered.
func TestExitGateExitsAtTheNextRequestAfterTheLastAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines := make(chan string, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			conn.Close()
			lines <- strings.TrimSpace(line)
		}
	}()
	var exits atomic.Int64
	rt := &fakeRuntime{}
	g := &exitGate{abandoned: func() int { return 5 }, bound: 4, logger: slog.New(slog.DiscardHandler), base: rt,
		api: ln.Addr().String(), exit: func() { exits.Add(1) }}
	g.unanswered.Store(2) // two invoke loops hold an invocation each

	runtimeCall(t, g, http.MethodPost, runtimeBase+"id-1/response")
	runtimeCall(t, g, http.MethodGet, runtimeNext) // id-2 still unanswered
	if n := exits.Load(); n != 0 {
		t.Fatalf("exited %d times with an invocation unanswered; want 0", n)
	}
	runtimeCall(t, g, http.MethodPost, runtimeBase+"id-2/response")
	runtimeCall(t, g, http.MethodPost, runtimeBase+"id-3/response") // the invocation the loop's next got
	runtimeCall(t, g, http.MethodGet, runtimeNext)
	if n := exits.Load(); n != 1 {
		t.Fatalf("exited %d times at the next request with all answered past the bound; want 1", n)
	}
	if got, want := <-lines, "GET /2018-06-01/runtime/invocation/next HTTP/1.1"; got != want {
		t.Errorf("the Runtime API got %q on the last call's connection; want %q", got, want)
	}
	// Another loop's next request in the same instant: sent before the
	// first one's invocation was counted.
	g.unanswered.Store(0)
	runtimeCall(t, g, http.MethodGet, runtimeNext)
	if n := exits.Load(); n != 1 {
		t.Errorf("exited %d times; want once", n)
	}
}

// If the last call cannot be written, the process goes on: the call
// passes as usual, and a later next request tries again.
func TestExitGateGoesOnWhenTheLastCallFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now
	var exits atomic.Int64
	rt := &fakeRuntime{}
	g := &exitGate{abandoned: func() int { return 5 }, bound: 4, logger: slog.New(slog.DiscardHandler), base: rt,
		api: closed, exit: func() { exits.Add(1) }}
	runtimeCall(t, g, http.MethodGet, runtimeNext)
	if n := exits.Load(); n != 0 {
		t.Errorf("exited %d times although the last call was not written; want 0", n)
	}
	if len(rt.calls) != 1 {
		t.Errorf("the Runtime API got %v through the gate; want the next request passed as usual", rt.calls)
	}
	if g.exiting.Load() {
		t.Errorf("still exiting after the failed last call; want a later next request to try again")
	}
}

// The gate's transport keeps a connection per invoke loop: under Managed
// Instances, concurrency loops each have a call out at once, and the next
// round reuses every connection instead of dialling all but two again.
func TestExitGateTransportKeepsAConnectionPerInvokeLoop(t *testing.T) {
	const concurrency = 8
	var arrived sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // every loop's call is out at once
		io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	tr := runtimeTransport(concurrency)
	t.Cleanup(tr.CloseIdleConnections)
	round := func() (reused int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		arrived.Add(concurrency)
		for range concurrency {
			wg.Go(func() {
				trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
					if info.Reused {
						mu.Lock()
						reused++
						mu.Unlock()
					}
				}}
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL+"/2018-06-01/runtime/invocation/next", nil)
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				// Read to the end: net/http pools the connection before
				// the reader sees io.EOF.
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		wg.Wait()
		return reused
	}
	round()
	if got := round(); got != concurrency {
		t.Errorf("the second round reused %d connections; want all %d", got, concurrency)
	}
}

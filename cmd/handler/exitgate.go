package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

// envRuntimeAPI is where Lambda serves its Runtime API; aws-lambda-go
// reads it in lambda.Start.
const envRuntimeAPI = "AWS_LAMBDA_RUNTIME_API"

// exitGate passes aws-lambda-go's calls to the Runtime API through, in
// this process, to end the process between invocations once too many
// abandoned actions still run in it (idem.Engine.Abandoned past
// maxAbandoned), instead of piling up their goroutines.
//
// Between invocations has one precise meaning here. An invocation is not
// over when its response is posted: Lambda completes it when the runtime
// asks for its next one (GET …/invocation/next; the emulator answers the
// caller only then). So the gate exits right after a next request is
// written to Lambda, when every invocation Lambda handed out through it
// has been answered (the response or error was accepted): that last
// request goes on a connection of its own, written unbuffered, so that
// Lambda has it whole before the process ends. With one
// invocation at a time that is right after answering the one that passed
// the bound; under Managed Instances, when the invocations in flight fall
// to zero, whichever loop then asks for its next (under a load that never
// lets them, the process keeps serving). An invocation Lambda hands to
// another loop in the instant of the exit fails as a crash would: nothing
// is acknowledged, and the event comes back.
type exitGate struct {
	abandoned func() int
	bound     int
	logger    *slog.Logger
	exit      func()
	api       string // Lambda's Runtime API, host:port
	base      http.RoundTripper
	// unanswered counts invocations handed out and not answered yet.
	unanswered atomic.Int64
	exiting    atomic.Bool
}

// startExitGate serves the gate on a port of the loopback interface, in
// front of the Runtime API at api (host:port), for concurrency invoke
// loops (AWS_LAMBDA_MAX_CONCURRENCY), and returns its address, for
// aws-lambda-go.
func startExitGate(api string, concurrency int, g *exitGate) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("runtime API gate: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: api})
	rp.FlushInterval = -1 // responses (streamed ones too) pass at once
	g.base, g.api = runtimeTransport(concurrency), api
	rp.Transport = g
	rp.ErrorLog = slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn)
	go func() { _ = http.Serve(ln, rp) }()
	return ln.Addr().String(), nil
}

// runtimeTransport is the gate's transport to the Runtime API, for
// concurrency invoke loops. Each loop has at most one call out at a time
// (a next request, then its answer), so concurrency connections serve
// them all; net/http keeps only 2 idle per host by default, so under
// Managed Instances every round of calls past the second closed the
// connections it had just used and dialled new ones. A pooled connection
// that turned out closed is also where an answer must be sent again
// (RoundTrip buffers it for that): fewer closed, fewer resends.
func runtimeTransport(concurrency int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // the Runtime API is never reached through a proxy
	t.MaxIdleConnsPerHost = max(concurrency, http.DefaultMaxIdleConnsPerHost)
	t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
	return t
}

// RoundTrip passes one Runtime API call, counting invocations handed out
// and answered; past the bound, a next request with none in flight is
// the process's last call.
func (g *exitGate) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	next := req.Method == http.MethodGet && strings.HasSuffix(path, "/runtime/invocation/next")
	answer := req.Method == http.MethodPost && strings.Contains(path, "/runtime/invocation/") &&
		(strings.HasSuffix(path, "/response") || strings.HasSuffix(path, "/error"))
	if next && g.exitDue() {
		g.sendLastAndExit(req)
	}
	// A streamed response (never sent by this function today) passes as it
	// comes: buffering it would hold it back.
	streamed := strings.EqualFold(req.Header.Get("Lambda-Runtime-Function-Response-Mode"), "streaming")
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil && !streamed {
		// The proxy's request cannot be rewound, so net/http could not send
		// an answer again on a fresh connection when the pooled one turned
		// out closed before anything was written (aws-lambda-go's own
		// client, with its bytes.Reader body, can): the answer would be lost.
		// Buffered, it can; net/http resends a POST only when nothing of it
		// was written.
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := g.base.RoundTrip(req)
	switch {
	case err != nil:
	case next && resp.StatusCode == http.StatusOK:
		g.unanswered.Add(1)
	case answer && resp.StatusCode == http.StatusAccepted:
		g.unanswered.Add(-1)
	}
	return resp, err
}

// exitDue reports whether the process should end now: every invocation
// handed out is answered, and more abandoned actions run than the bound.
func (g *exitGate) exitDue() bool {
	return g.bound > 0 && g.unanswered.Load() == 0 && g.abandoned() > g.bound
}

// sendLastAndExit sends req, a next request, on a connection of its own, unbuffered:
// once Write returns, the kernel has it and delivers it after the process
// is gone, and Lambda completes the invocation the loop answered. Then
// the process exits (once). If the connection fails, the call goes on as
// usual and a later one tries again.
func (g *exitGate) sendLastAndExit(req *http.Request) {
	if !g.exiting.CompareAndSwap(false, true) {
		return
	}
	conn, err := net.Dial("tcp", g.api)
	if err == nil {
		_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n", req.URL.RequestURI(), g.api, req.UserAgent())
	}
	if err != nil {
		g.logger.Warn("could not end the process between invocations; it goes on", "error", err.Error())
		g.exiting.Store(false)
		return
	}
	g.logger.Warn("exiting between invocations: too many abandoned actions still running in this process",
		"abandoned_running", g.abandoned(), "max_abandoned", g.bound)
	g.exit()
}

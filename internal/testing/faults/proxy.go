package faults

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Decision is what a Proxy does to one request: a Kind, and a delay added
// before anything else happens (latency; it combines with any Kind).
type Decision struct {
	Kind  Kind
	Delay time.Duration
}

// Proxy is a reverse proxy on 127.0.0.1 in front of a real server (moto's
// DynamoDB, say) that injects the faults Decide chooses, request by
// request, and logs each one with what the request was for:
//
//	None                   forwarded; the reply passed back
//	Throttle, ServerError,
//	Unavailable, ...       not forwarded; the service's own error reply (Replies)
//	Reset, Refuse          not forwarded; the connection is reset (the client
//	                       cannot tell whether the server got it)
//	DropReply              forwarded, the server acts, then the connection is
//	                       reset instead of replying (outcome unknown)
//
// A Proxy cannot refuse a connection it has accepted: Refuse resets it
// before forwarding, as Reset does. Start it with Start; stop it with Close.
type Proxy struct {
	// Target is the real server's base URL (http://127.0.0.1:PORT).
	Target string
	// Describe names a request's operation and subject (for DynamoDB, the
	// X-Amz-Target operation and the item's key), for Decide and the log.
	// Nil names neither.
	Describe func(req *http.Request, body []byte) (op, subject string)
	// Decide chooses the fault for a request. Nil passes everything. It
	// must be safe for concurrent use.
	Decide func(op, subject string) Decision
	// Replies builds the service's answer for the kinds that are answers.
	Replies Replies
	// Log, if set, receives each logged event as a line.
	Log io.Writer

	srv       *http.Server
	transport *http.Transport

	mu       sync.Mutex
	events   []Event
	counts   map[Kind]int
	total    int
	forwards []time.Duration
}

// Event is one request the proxy did something to (a fault or a delay).
type Event struct {
	At      time.Time
	Op      string
	Subject string
	Kind    Kind
	Delay   time.Duration
	// Forwarded: the server got the request.
	Forwarded bool
	// Status is the server's status for a forwarded request (DropReply:
	// the reply that was dropped), or the injected reply's.
	Status int
	Err    string
}

// String formats the event as one log line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s proxy %s %s", e.At.Format("15:04:05.000"), e.Op, e.Subject)
	if e.Delay > 0 {
		fmt.Fprintf(&b, " delay=%v", e.Delay.Round(time.Millisecond))
	}
	kind := e.Kind
	if kind == None {
		kind = "passed"
	}
	fmt.Fprintf(&b, " %s forwarded=%t", kind, e.Forwarded)
	if e.Status != 0 {
		fmt.Fprintf(&b, " status=%d", e.Status)
	}
	if e.Err != "" {
		b.WriteString(" error=" + e.Err)
	}
	return b.String()
}

// Start listens on a free port of 127.0.0.1 and returns the proxy's URL.
func (p *Proxy) Start() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	p.counts = map[Kind]int{}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	if p.srv == nil {
		return nil
	}
	err := p.srv.Close()
	p.transport.CloseIdleConnections()
	return err
}

// Events returns a copy of the events logged so far.
func (p *Proxy) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// ForwardTimes returns how long the server took to answer each forwarded
// request (until its reply's headers), in the order they were sent.
func (p *Proxy) ForwardTimes() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.forwards)
}

// Counts returns how many requests got each kind (None: passed untouched
// or only delayed), and the total number of requests.
func (p *Proxy) Counts() (map[Kind]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Kind]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out, p.total
}

func (p *Proxy) note(e Event) {
	p.mu.Lock()
	p.total++
	p.counts[e.Kind]++
	logged := e.Kind != None || e.Delay > 0
	if logged {
		p.events = append(p.events, e)
	}
	p.mu.Unlock()
	if logged && p.Log != nil {
		fmt.Fprintln(p.Log, e.String())
	}
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away
	}
	var op, subject string
	if p.Describe != nil {
		op, subject = p.Describe(r, body)
	}
	var d Decision
	if p.Decide != nil {
		d = p.Decide(op, subject)
	}
	e := Event{At: time.Now(), Op: op, Subject: subject, Kind: d.Kind, Delay: d.Delay}
	if d.Delay > 0 {
		select {
		case <-time.After(d.Delay):
		case <-r.Context().Done():
			e.Err = "client gave up during the delay"
			p.note(e)
			return
		}
	}
	switch d.Kind {
	case None, DropReply:
		resp, err := p.forward(r, body)
		e.Forwarded = true
		if err != nil {
			e.Err = err.Error()
			p.note(e)
			ResetConn(w)
			return
		}
		defer resp.Body.Close()
		e.Status = resp.StatusCode
		if d.Kind == DropReply {
			// The server acted; the client never learns how.
			_, _ = io.Copy(io.Discard, resp.Body)
			p.note(e)
			ResetConn(w)
			return
		}
		p.note(e)
		copyResponse(w, resp)
	case Reset, Refuse:
		p.note(e)
		ResetConn(w)
	default:
		if p.Replies == nil {
			e.Err = "no Replies for " + string(d.Kind)
			p.note(e)
			ResetConn(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		resp := p.Replies(d.Kind, r)
		defer resp.Body.Close()
		e.Status = resp.StatusCode
		p.note(e)
		copyResponse(w, resp)
	}
}

// forward sends the request to Target with its original Host header (a
// signed request stays valid).
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.Target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
			continue
		}
		out.Header[k] = vs
	}
	out.Host = r.Host
	start := time.Now()
	resp, err := p.transport.RoundTrip(out)
	if err == nil {
		p.mu.Lock()
		p.forwards = append(p.forwards, time.Since(start))
		p.mu.Unlock()
	}
	return resp, err
}

// copyResponse writes resp to w: headers, status and body.
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// ResetConn closes the client's connection of a handler's request with a TCP
// reset (no reply), as a server that crashed or a middlebox would.
func ResetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection without a reply
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

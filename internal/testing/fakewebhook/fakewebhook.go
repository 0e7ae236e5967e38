// Package fakewebhook is a webhook receiver for tests, benchmarks, the demo,
// the soak and the operators' local stack: it counts the deliveries it gets
// per Idempotency-Key, answers with scripted replies, rules for a class of
// keys, or seeded chaos (503, 429 with Retry-After, a hang after accepting,
// a connection reset before or after accepting, a full outage), and keeps
// an audit log of every delivery (its signature headers and body, and
// whether it was accepted, acted on, and whether its reply was lost). It is a real HTTP server (run it under
// httptest.NewServer or http.Server), not a mock of one.
//
// It does not de-duplicate: a real receiver would drop a second delivery
// with the same Idempotency-Key; this one accepts and records it, so that
// tests see every duplicate the sender produced.
package fakewebhook

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/oncely/oncely/internal/testing/faults"
)

// Reply is one scripted answer.
type Reply struct {
	Status     int           // 0 means 202
	RetryAfter string        // Retry-After header value, if any
	Delay      time.Duration // wait before answering
	Hang       bool          // accept, then never answer (until the request is cancelled or Close)
	// Hold, when not nil, holds the answer until it is closed (or the
	// request is cancelled): the test decides when the owner finishes.
	Hold <-chan struct{} `json:"-"`
}

// Rule answers every delivery whose key matches Match (a path.Match
// pattern such as "evt:*:refund") with Reply, while it is set: a
// downstream bug, or an outage, for a class of events. Scripted replies
// come first.
type Rule struct {
	Match string `json:"match"`
	Reply
}

// Mode is how the receiver treated one delivery.
type Mode string

// The modes. Accepted ones (the receiver acted on the delivery) are
// ModeAccept, ModeHang and ModeResetAfter, and a scripted 2xx.
const (
	// ModeAccept: accepted, answered 202.
	ModeAccept Mode = "accept"
	// ModeScripted: answered with the key's next scripted Reply.
	ModeScripted Mode = "scripted"
	// ModeUnavailable: refused with 503; not accepted.
	ModeUnavailable Mode = "unavailable_503"
	// ModeThrottled: refused with 429 and Retry-After; not accepted.
	ModeThrottled Mode = "throttled_429"
	// ModeHang: accepted, then no reply until the sender gives up (a
	// request timeout): the sender cannot know it was accepted.
	ModeHang Mode = "hang_after_accept"
	// ModeResetBefore: the connection is reset before the delivery is
	// read as accepted; not accepted.
	ModeResetBefore Mode = "reset_before_accept"
	// ModeResetAfter: accepted, then the connection is reset instead of a
	// reply: the sender cannot know it was accepted.
	ModeResetAfter Mode = "reset_after_accept"
	// ModeOutage: refused with 503 during a full outage; not accepted.
	ModeOutage Mode = "outage_503"
)

// Chaos is a seeded random choice of a mode per delivery. Probabilities
// are per delivery and must add up to at most 1; the rest is ModeAccept.
type Chaos struct {
	Seed                                                  uint64
	Unavailable, Throttled, Hang, ResetBefore, ResetAfter float64
	// RetryAfter is the Retry-After value of a 429 (seconds). Empty means "1".
	RetryAfter string
}

// Delivery is one request the receiver got: the audit log's entry.
type Delivery struct {
	Seq  int
	At   time.Time
	Key  string // the Idempotency-Key header
	Mode Mode
	// Status is the status answered (0 when no reply was sent).
	Status int
	// Accepted: the receiver acted on the delivery (the side effect).
	Accepted bool
	// ReplyLost: accepted, but the sender did not get the reply: a hang
	// past its timeout, a reset after accepting, or the sender gone before
	// the reply was written.
	ReplyLost bool
	Done      time.Time
	// Headers are the signature headers as received: webhook-id,
	// webhook-timestamp, webhook-signature, and Idempotency-Key.
	Headers map[string]string
	// Body is the delivery's body as received.
	Body []byte
}

// Server counts deliveries by Idempotency-Key.
type Server struct {
	mu       sync.Mutex
	counts   map[string]int
	scripts  map[string][]Reply
	closed   chan struct{}
	once     sync.Once
	rules    []Rule
	statuses map[string][]int
	chaos    *Chaos
	rng      *rand.Rand
	outage   bool
	audit    []Delivery
	onAccept func(Delivery)
}

// New returns an empty Server.
func New() *Server {
	return &Server{counts: map[string]int{}, statuses: map[string][]int{}, scripts: map[string][]Reply{}, closed: make(chan struct{})}
}

// SetRules replaces the rules (nil clears them). A malformed pattern is
// an error.
func (s *Server) SetRules(rules []Rule) error {
	for _, r := range rules {
		if _, err := path.Match(r.Match, ""); err != nil {
			return fmt.Errorf("rule %q: %w", r.Match, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = slices.Clone(rules)
	return nil
}

// Statuses returns the status answered to each delivery for key, in order
// (0 for one that got no reply).
func (s *Server) Statuses(key string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.statuses[key])
}

// Script queues replies for key: each delivery takes the next one; when
// they run out, deliveries get 202 (or chaos, if set).
func (s *Server) Script(key string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[key] = append(s.scripts[key], replies...)
}

// SetChaos turns seeded chaos on (nil turns it off).
func (s *Server) SetChaos(c *Chaos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chaos = c
	s.rng = nil
	if c != nil {
		s.rng = rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	}
}

// SetOutage starts (true) or ends (false) a full outage: every delivery is
// refused with 503 until it ends.
func (s *Server) SetOutage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = on
}

// OnAccept sets a hook called for each accepted delivery after it is
// recorded as accepted and before any reply is written (the soak kills the
// sender's runtime there). It runs on the request's goroutine.
func (s *Server) OnAccept(f func(Delivery)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onAccept = f
}

// Count returns the deliveries received for key.
func (s *Server) Count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[key]
}

// Counts returns a copy of all counts.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// Total returns all deliveries.
func (s *Server) Total() int {
	n := 0
	for _, v := range s.Counts() {
		n += v
	}
	return n
}

// Audit returns every delivery so far, in arrival order.
func (s *Server) Audit() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.audit)
}

// Accepted returns the accepted deliveries so far, in arrival order.
func (s *Server) Accepted() []Delivery {
	var out []Delivery
	for _, d := range s.Audit() {
		if d.Accepted {
			out = append(out, d)
		}
	}
	return out
}

// Close releases hanging requests.
func (s *Server) Close() { s.once.Do(func() { close(s.closed) }) }

// choose picks the mode and the scripted reply of a new delivery, and
// records it in the audit log. It holds the lock.
func (s *Server) choose(key string) (Delivery, Reply) {
	s.counts[key]++
	d := Delivery{Seq: len(s.audit), At: time.Now(), Key: key, Mode: ModeAccept}
	var reply Reply
	rule, ruled := s.rule(key)
	switch q := s.scripts[key]; {
	case len(q) > 0 || ruled:
		if len(q) > 0 {
			reply, s.scripts[key] = q[0], q[1:]
		} else {
			reply = rule
		}
		d.Mode = ModeScripted
		d.Accepted = reply.Hang || reply.Status == 0 || (reply.Status >= 200 && reply.Status < 300)
	case s.outage:
		d.Mode = ModeOutage
	case s.chaos != nil:
		x, c := s.rng.Float64(), s.chaos
		for _, m := range []struct {
			p    float64
			mode Mode
		}{{c.Unavailable, ModeUnavailable}, {c.Throttled, ModeThrottled}, {c.Hang, ModeHang}, {c.ResetBefore, ModeResetBefore}, {c.ResetAfter, ModeResetAfter}} {
			if x < m.p {
				d.Mode = m.mode
				break
			}
			x -= m.p
		}
	}
	switch d.Mode {
	case ModeAccept, ModeHang, ModeResetAfter:
		d.Accepted = true
	}
	s.audit = append(s.audit, d)
	// The status this delivery is answered with (0: none), recorded now,
	// in arrival order: the reply may reach the sender before finish runs.
	s.statuses[key] = append(s.statuses[key], intendedStatus(d.Mode, reply))
	return d, reply
}

// intendedStatus is the status a delivery in mode m is answered with.
func intendedStatus(m Mode, reply Reply) int {
	switch m {
	case ModeUnavailable, ModeOutage:
		return http.StatusServiceUnavailable
	case ModeThrottled:
		return http.StatusTooManyRequests
	case ModeHang, ModeResetBefore, ModeResetAfter:
		return 0
	case ModeScripted:
		if reply.Hang {
			return 0
		}
		if reply.Status != 0 {
			return reply.Status
		}
	}
	return http.StatusAccepted
}

// rule returns the reply of the first rule matching key. It holds the lock.
func (s *Server) rule(key string) (Reply, bool) {
	for _, r := range s.rules {
		if ok, _ := path.Match(r.Match, key); ok {
			return r.Reply, true
		}
	}
	return Reply{}, false
}

func (s *Server) finish(d Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d.Done = time.Now()
	s.audit[d.Seq] = d
}

// ServeHTTP implements http.Handler. GET /counts returns the counts as
// JSON, and GET /deliveries the status answered to each delivery, per key;
// PUT /rules sets the rules (a JSON list of {"match": "evt:*:refund",
// "status": 422}) and DELETE /rules clears them; any POST is a delivery.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/counts":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Counts())
		return
	case r.Method == http.MethodGet && r.URL.Path == "/deliveries":
		s.mu.Lock()
		out := maps.Clone(s.statuses)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	case r.URL.Path == "/rules" && (r.Method == http.MethodPut || r.Method == http.MethodDelete):
		var rules []Rule
		if r.Method == http.MethodPut {
			if err := json.NewDecoder(r.Body).Decode(&rules); err != nil {
				http.Error(w, "rules: want a JSON list of {\"match\": PATTERN, \"status\": CODE}: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		if err := s.SetRules(rules); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// Read the whole body first: only then does the server watch the
	// connection, and end r.Context() when the sender goes away.
	body, _ := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	headers := map[string]string{}
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "Idempotency-Key"} {
		headers[h] = r.Header.Get(h)
	}
	s.mu.Lock()
	d, reply := s.choose(key)
	d.Headers, d.Body = headers, body
	s.audit[d.Seq] = d
	hook := s.onAccept
	retryAfter := "1"
	if s.chaos != nil && s.chaos.RetryAfter != "" {
		retryAfter = s.chaos.RetryAfter
	}
	s.mu.Unlock()
	defer func() { s.finish(d) }()
	if d.Accepted && hook != nil {
		hook(d)
	}
	status := http.StatusAccepted
	switch d.Mode {
	case ModeUnavailable, ModeOutage:
		status = http.StatusServiceUnavailable
	case ModeThrottled:
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", retryAfter)
	case ModeResetBefore, ModeResetAfter:
		d.ReplyLost = d.Accepted
		faults.ResetConn(w)
		return
	case ModeHang:
		d.ReplyLost = true
		s.hang(r)
		return
	case ModeScripted:
		if reply.Hold != nil {
			select {
			case <-reply.Hold:
			case <-r.Context().Done():
				d.ReplyLost = d.Accepted
				return
			case <-s.closed:
			}
		}
		if reply.Hang {
			d.ReplyLost = true
			s.hang(r)
			return
		}
		if reply.Delay > 0 {
			select {
			case <-time.After(reply.Delay):
			case <-r.Context().Done():
				d.ReplyLost = d.Accepted
				return
			}
		}
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		if reply.Status != 0 {
			status = reply.Status
		}
	}
	if r.Context().Err() != nil {
		// The sender gave up (its timeout, or it died) before the reply.
		d.ReplyLost = d.Accepted
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err := w.Write([]byte(`{"received":` + strconv.Quote(key) + `}`))
	if err == nil {
		err = http.NewResponseController(w).Flush()
	}
	d.Status = status
	if err != nil || r.Context().Err() != nil {
		d.ReplyLost = d.Accepted
	}
}

func (s *Server) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.closed:
	}
}

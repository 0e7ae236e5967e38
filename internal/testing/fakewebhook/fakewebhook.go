// Package fakewebhook is a webhook receiver for tests, benchmarks and the
// demo: it counts the deliveries it gets per Idempotency-Key, keeps each
// one's signature headers and body, and answers with scripted replies or
// rules. It is a real HTTP server (run it under
// httptest.NewServer or http.Server), not a mock of one.
package fakewebhook

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Reply is one scripted answer.
type Reply struct {
	Status     int           // 0 means 202
	RetryAfter string        // Retry-After header value, if any
	Delay      time.Duration // wait before answering
	Hang       bool          // never answer (until the request is cancelled or Close)
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

// Delivery is one request as received: its signature headers and body.
type Delivery struct {
	Headers map[string]string // webhook-id, webhook-timestamp, webhook-signature, Idempotency-Key
	Body    []byte
}

// Server counts deliveries by Idempotency-Key.
type Server struct {
	mu         sync.Mutex
	counts     map[string]int
	deliveries []Delivery
	statuses   map[string][]int
	rules      []Rule
	scripts    map[string][]Reply
	closed     chan struct{}
	once       sync.Once
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

// Statuses returns the status answered to each delivery for key, in order.
func (s *Server) Statuses(key string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.statuses[key])
}

// Script queues replies for key: each delivery takes the next one; when
// they run out, deliveries get 202.
func (s *Server) Script(key string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[key] = append(s.scripts[key], replies...)
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

// Deliveries returns every delivery received, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

// Close releases hanging requests.
func (s *Server) Close() { s.once.Do(func() { close(s.closed) }) }

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
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	d := Delivery{Headers: map[string]string{}, Body: body}
	for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature", "Idempotency-Key"} {
		d.Headers[h] = r.Header.Get(h)
	}
	s.mu.Lock()
	s.counts[key]++
	s.deliveries = append(s.deliveries, d)
	var reply Reply
	if q := s.scripts[key]; len(q) > 0 {
		reply, s.scripts[key] = q[0], q[1:]
	} else {
		for _, rule := range s.rules {
			if ok, _ := path.Match(rule.Match, key); ok {
				reply = rule.Reply
				break
			}
		}
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusAccepted
	}
	s.statuses[key] = append(s.statuses[key], status)
	s.mu.Unlock()
	if reply.Hold != nil {
		select {
		case <-reply.Hold:
		case <-r.Context().Done():
			return
		case <-s.closed:
		}
	}
	if reply.Hang {
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		return
	}
	if reply.Delay > 0 {
		select {
		case <-time.After(reply.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if reply.RetryAfter != "" {
		w.Header().Set("Retry-After", reply.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"received":` + strconv.Quote(key) + `}`))
}

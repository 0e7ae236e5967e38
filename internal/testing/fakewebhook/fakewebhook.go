// Package downstream is a webhook receiver for tests, benchmarks and the
// demo: it counts the deliveries it gets per Idempotency-Key and answers
// with scripted replies. It is a real HTTP server (run it under
// httptest.NewServer or http.Server), not a mock of one.
package fakewebhook

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
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
	scripts    map[string][]Reply
	closed     chan struct{}
	once       sync.Once
}

// New returns an empty Server.
func New() *Server {
	return &Server{counts: map[string]int{}, scripts: map[string][]Reply{}, closed: make(chan struct{})}
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
// JSON; any POST is a delivery.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/counts" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Counts())
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
	}
	s.mu.Unlock()
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
	status := reply.Status
	if status == 0 {
		status = http.StatusAccepted
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"received":` + strconv.Quote(key) + `}`))
}

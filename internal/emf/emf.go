// Package emf writes CloudWatch Embedded Metric Format documents: one JSON
// line per invocation, which CloudWatch Logs turns into metrics. It follows
// the EMF specification: a root "_aws" member with Timestamp (epoch ms) and
// CloudWatchMetrics directives, and each metric and dimension value as a
// root member.
package emf

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Outcome labels: what happened to one record or request. They are the
// metric names, and the "outcome" field of each record's log line.
const (
	Executed   = "executed"    // the action ran and its success is stored
	Replayed   = "replayed"    // a stored success was returned, or an in-batch duplicate shared it
	Permanent  = "permanent"   // a permanent failure is stored (run now or replayed)
	Poison     = "poison"      // not processable as an event; a poison note is stored
	InProgress = "in_progress" // another worker holds the key
	Transient  = "transient"   // failed transiently; released for a retry
	LeaseLost  = "lease_lost"  // the lease was taken over; the result was discarded
	StoreError = "store_error" // the store failed; nothing is known to be stored
	Skipped    = "skipped"     // not started: deadline near, or an earlier FIFO record failed
)

// Labels lists every outcome label, in a stable order.
var Labels = []string{Executed, Replayed, Permanent, Poison, InProgress, Transient, LeaseLost, StoreError, Skipped}

// Counts tallies outcomes. It is safe for concurrent use.
type Counts struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one outcome.
func (c *Counts) Add(label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[label]++
}

// Get returns the count of label.
func (c *Counts) Get(label string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[label]
}

type metric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type directive struct {
	Namespace  string     `json:"Namespace"`
	Dimensions [][]string `json:"Dimensions"`
	Metrics    []metric   `json:"Metrics"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// Write writes one EMF document: every label's count (zeros included, so
// alarms see a value) and the duration in milliseconds, under namespace,
// with dimensions FunctionName and Source.
func Write(w io.Writer, namespace, function, source string, c *Counts, duration time.Duration, at time.Time) error {
	doc := map[string]any{
		"FunctionName": function,
		"Source":       source,
	}
	d := directive{Namespace: namespace, Dimensions: [][]string{{"FunctionName", "Source"}}}
	for _, l := range Labels {
		d.Metrics = append(d.Metrics, metric{Name: l, Unit: "Count"})
		doc[l] = c.Get(l)
	}
	d.Metrics = append(d.Metrics, metric{Name: "duration", Unit: "Milliseconds"})
	doc["duration"] = float64(duration.Microseconds()) / 1000
	doc["_aws"] = metadata{Timestamp: at.UnixMilli(), CloudWatchMetrics: []directive{d}}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

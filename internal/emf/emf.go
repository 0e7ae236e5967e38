// Package emf writes CloudWatch Embedded Metric Format documents: one JSON
// line per invocation, which CloudWatch Logs turns into metrics. It follows
// the EMF specification: a root "_aws" member with Timestamp (epoch ms) and
// CloudWatchMetrics directives, and each metric and dimension value as a
// root member.
package emf

import (
	"encoding/json"
	"io"
	"time"
)

// Dimensions is the one dimension set of every document. CloudWatch keys a
// metric by its full dimension set, so an alarm on these metrics must name
// exactly these dimensions (the template's tests check it).
var Dimensions = []string{"FunctionName", "Source"}

// DurationMetric is the name of the invocation's duration, in milliseconds.
const DurationMetric = "duration"

// Counts tallies metrics by name. It is not safe for concurrent use: each
// invocation counts into its own Counts, after its adapter has returned
// (concurrent invocations under Lambda Managed Instances never share one).
// The zero value is ready to use.
type Counts struct {
	n map[string]int
}

// Add counts one.
func (c *Counts) Add(name string) { c.AddN(name, 1) }

// AddN counts n.
func (c *Counts) AddN(name string, n int) {
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name] += n
}

// Get returns the count of name.
func (c *Counts) Get(name string) int {
	return c.n[name]
}

// Document is one invocation's metrics.
type Document struct {
	Namespace string
	// Dimensions holds a value for each name in the package's Dimensions.
	Dimensions map[string]string
	// Names lists the count metrics to write, zeros included, so that
	// alarms always see a value.
	Names    []string
	Counts   *Counts
	Duration time.Duration
	At       time.Time
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

// Write writes d as one EMF line, with one w.Write call: a writer shared
// by concurrent invocations (stdout) keeps each line whole.
func Write(w io.Writer, d Document) error {
	doc := map[string]any{}
	for _, name := range Dimensions {
		doc[name] = d.Dimensions[name]
	}
	dir := directive{Namespace: d.Namespace, Dimensions: [][]string{Dimensions}}
	for _, name := range d.Names {
		dir.Metrics = append(dir.Metrics, metric{Name: name, Unit: "Count"})
		doc[name] = d.Counts.Get(name)
	}
	dir.Metrics = append(dir.Metrics, metric{Name: DurationMetric, Unit: "Milliseconds"})
	doc[DurationMetric] = float64(d.Duration.Microseconds()) / 1000
	doc["_aws"] = metadata{Timestamp: d.At.UnixMilli(), CloudWatchMetrics: []directive{dir}}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

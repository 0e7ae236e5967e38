// Package samtemplate reads the settings of template.yaml that a local run
// must share with the deployed one: each SQS event source mapping (batch
// size, batching window, maximum concurrency, response types), its queue
// (FIFO, visibility timeout, retention, redrive policy and DLQ) and its
// function (timeout, literal environment). The event-source-mapping runner
// (package esm), the demo and the soak build their queues from it, so that
// a local run cannot drift from what `sam deploy` creates.
//
// It is test support: no shipped command links it. It reads yaml.Node
// trees, so the CloudFormation short forms (!Ref, !GetAtt, !Sub) survive as
// tags; a setting given by an intrinsic function is reported as unset,
// unless the function is a !Ref to a parameter with a Default.
package samtemplate

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults AWS applies when the template leaves a property out.
const (
	DefaultFunctionTimeout    = 3 * time.Second    // Lambda
	DefaultVisibilityTimeout  = 30 * time.Second   // SQS
	DefaultRetention          = 4 * 24 * time.Hour // SQS
	DefaultBatchSize          = 10                 // Lambda SQS event source
	DefaultBatchingWindow     = time.Duration(0)   // Lambda SQS event source
	DefaultMaximumConcurrency = 1000               // Lambda: no ScalingConfig means no limit below the ESM's own (1,000)
)

// Template is a parsed template.
type Template struct {
	// Path is the file it was read from.
	Path string
	// Queues are the AWS::SQS::Queue resources by logical id.
	Queues map[string]Queue
	// Functions are the AWS::Serverless::Function resources by logical id.
	Functions map[string]Function
	// Sources are the SQS event sources of every function, sorted by
	// function and event name.
	Sources []EventSource
	// API is the function the HTTP API's integration invokes (its logical
	// id), "" without one. It may differ from the sources' function: the
	// project's template serves the API and the queues with two functions
	// of the same bootstrap, each with its own timeout and environment.
	API string
}

// Queue is one AWS::SQS::Queue.
type Queue struct {
	ID                string
	FIFO              bool
	VisibilityTimeout time.Duration
	Retention         time.Duration
	// MaxReceiveCount and DLQ are the redrive policy; zero and "" without one.
	MaxReceiveCount int
	DLQ             string // the DLQ's logical id
}

// Function is one AWS::Serverless::Function.
type Function struct {
	ID      string
	Timeout time.Duration
	// Env holds the environment variables with literal values (and !Ref to
	// a parameter with a Default, resolved to the default). Variables set
	// by other intrinsic functions are in Computed instead.
	Env      map[string]string
	Computed []string
}

// EventSource is one SQS event source mapping of a function.
type EventSource struct {
	Function                string // logical id
	Name                    string // the event's name under Events
	Queue                   string // the queue's logical id
	BatchSize               int
	BatchingWindow          time.Duration
	MaximumConcurrency      int
	ReportBatchItemFailures bool
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Path = path
	return t, nil
}

// Parse parses a template's bytes.
func Parse(data []byte) (*Template, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("want one YAML document holding a mapping")
	}
	p := parser{root: doc.Content[0]}
	t := &Template{Queues: map[string]Queue{}, Functions: map[string]Function{}}
	resources := Get(p.root, "Resources")
	if resources == nil {
		return nil, fmt.Errorf("no Resources")
	}
	for id, res := range Pairs(resources) {
		props := Get(res, "Properties")
		switch str(Get(res, "Type")) {
		case "AWS::SQS::Queue":
			q, err := p.queue(id, props)
			if err != nil {
				return nil, err
			}
			t.Queues[id] = q
		case "AWS::ApiGatewayV2::Integration":
			if id, attr, ok := GetAtt(Get(props, "IntegrationUri")); ok && attr == "Arn" {
				if t.API != "" && t.API != id {
					return nil, fmt.Errorf("%s: a second API function %q (the first is %q)", id, id, t.API)
				}
				t.API = id
			}
		case "AWS::Serverless::Function":
			f, err := p.function(id, props)
			if err != nil {
				return nil, err
			}
			t.Functions[id] = f
			for name, ev := range Pairs(Get(props, "Events")) {
				if str(Get(ev, "Type")) != "SQS" {
					continue
				}
				s, err := p.source(id, name, Get(ev, "Properties"))
				if err != nil {
					return nil, err
				}
				t.Sources = append(t.Sources, s)
			}
		}
	}
	for _, s := range t.Sources {
		if _, ok := t.Queues[s.Queue]; !ok {
			return nil, fmt.Errorf("%s.Events.%s: queue %q is not an AWS::SQS::Queue of this template", s.Function, s.Name, s.Queue)
		}
	}
	if _, ok := t.Functions[t.API]; t.API != "" && !ok {
		return nil, fmt.Errorf("the API's integration invokes %q, not an AWS::Serverless::Function of this template", t.API)
	}
	for id, q := range t.Queues {
		if q.DLQ != "" {
			if _, ok := t.Queues[q.DLQ]; !ok {
				return nil, fmt.Errorf("%s: deadLetterTargetArn %q is not an AWS::SQS::Queue of this template", id, q.DLQ)
			}
		}
	}
	slices.SortFunc(t.Sources, func(a, b EventSource) int {
		return strings.Compare(a.Function+"."+a.Name, b.Function+"."+b.Name)
	})
	return t, nil
}

// Source returns the event source whose queue is queueID.
func (t *Template) Source(queueID string) (EventSource, bool) {
	for _, s := range t.Sources {
		if s.Queue == queueID {
			return s, true
		}
	}
	return EventSource{}, false
}

type parser struct{ root *yaml.Node }

func (p parser) queue(id string, props *yaml.Node) (Queue, error) {
	q := Queue{ID: id, VisibilityTimeout: DefaultVisibilityTimeout, Retention: DefaultRetention}
	var err error
	if q.FIFO, err = p.boolOr(Get(props, "FifoQueue"), false); err != nil {
		return q, fmt.Errorf("%s.FifoQueue: %w", id, err)
	}
	if q.VisibilityTimeout, err = p.secondsOr(Get(props, "VisibilityTimeout"), q.VisibilityTimeout); err != nil {
		return q, fmt.Errorf("%s.VisibilityTimeout: %w", id, err)
	}
	if q.Retention, err = p.secondsOr(Get(props, "MessageRetentionPeriod"), q.Retention); err != nil {
		return q, fmt.Errorf("%s.MessageRetentionPeriod: %w", id, err)
	}
	if rp := Get(props, "RedrivePolicy"); rp != nil {
		if q.MaxReceiveCount, err = p.intOr(Get(rp, "maxReceiveCount"), 0); err != nil || q.MaxReceiveCount < 1 {
			return q, fmt.Errorf("%s.RedrivePolicy.maxReceiveCount: want a positive integer (%v)", id, err)
		}
		dlq, attr, ok := GetAtt(Get(rp, "deadLetterTargetArn"))
		if !ok || attr != "Arn" {
			return q, fmt.Errorf("%s.RedrivePolicy.deadLetterTargetArn: want !GetAtt <queue>.Arn", id)
		}
		q.DLQ = dlq
	}
	return q, nil
}

func (p parser) function(id string, props *yaml.Node) (Function, error) {
	f := Function{ID: id, Env: map[string]string{}}
	timeout := Get(props, "Timeout")
	if timeout == nil {
		timeout = Get(p.root, "Globals", "Function", "Timeout")
	}
	var err error
	if f.Timeout, err = p.secondsOr(timeout, DefaultFunctionTimeout); err != nil {
		return f, fmt.Errorf("%s.Timeout: %w", id, err)
	}
	for _, vars := range []*yaml.Node{Get(p.root, "Globals", "Function", "Environment", "Variables"), Get(props, "Environment", "Variables")} {
		for name, v := range Pairs(vars) {
			if s, ok := p.literal(v); ok {
				f.Env[name] = s
				f.Computed = slices.DeleteFunc(f.Computed, func(c string) bool { return c == name })
			} else {
				delete(f.Env, name)
				if !slices.Contains(f.Computed, name) {
					f.Computed = append(f.Computed, name)
				}
			}
		}
	}
	slices.Sort(f.Computed)
	return f, nil
}

func (p parser) source(fn, name string, props *yaml.Node) (EventSource, error) {
	s := EventSource{Function: fn, Name: name, BatchSize: DefaultBatchSize, BatchingWindow: DefaultBatchingWindow, MaximumConcurrency: DefaultMaximumConcurrency}
	where := fn + ".Events." + name
	q, attr, ok := GetAtt(Get(props, "Queue"))
	if !ok || attr != "Arn" {
		return s, fmt.Errorf("%s.Queue: want !GetAtt <queue>.Arn", where)
	}
	s.Queue = q
	var err error
	if s.BatchSize, err = p.intOr(Get(props, "BatchSize"), s.BatchSize); err != nil || s.BatchSize < 1 {
		return s, fmt.Errorf("%s.BatchSize: want a positive integer (%v)", where, err)
	}
	if s.BatchingWindow, err = p.secondsOr(Get(props, "MaximumBatchingWindowInSeconds"), s.BatchingWindow); err != nil {
		return s, fmt.Errorf("%s.MaximumBatchingWindowInSeconds: %w", where, err)
	}
	if s.MaximumConcurrency, err = p.intOr(Get(props, "ScalingConfig", "MaximumConcurrency"), s.MaximumConcurrency); err != nil || s.MaximumConcurrency < 1 {
		return s, fmt.Errorf("%s.ScalingConfig.MaximumConcurrency: want a positive integer (%v)", where, err)
	}
	for _, it := range Items(Get(props, "FunctionResponseTypes")) {
		if str(it) == "ReportBatchItemFailures" {
			s.ReportBatchItemFailures = true
		}
	}
	return s, nil
}

// literal returns a scalar's value, resolving !Ref to a parameter's Default.
func (p parser) literal(n *yaml.Node) (string, bool) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", false
	}
	if n.Tag == "!Ref" {
		def := Get(p.root, "Parameters", n.Value, "Default")
		if def == nil || def.Kind != yaml.ScalarNode || IsIntrinsic(def) {
			return "", false
		}
		return def.Value, true
	}
	if IsIntrinsic(n) {
		return "", false
	}
	return n.Value, true
}

func (p parser) intOr(n *yaml.Node, def int) (int, error) {
	if n == nil {
		return def, nil
	}
	s, ok := p.literal(n)
	if !ok {
		return def, fmt.Errorf("got %s at line %d, want a literal integer", describe(n), n.Line)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return def, fmt.Errorf("got %q at line %d, want an integer", s, n.Line)
	}
	return v, nil
}

func (p parser) secondsOr(n *yaml.Node, def time.Duration) (time.Duration, error) {
	if n == nil {
		return def, nil
	}
	v, err := p.intOr(n, 0)
	if err != nil {
		return def, err
	}
	if v < 0 {
		return def, fmt.Errorf("got %d at line %d, want seconds >= 0", v, n.Line)
	}
	return time.Duration(v) * time.Second, nil
}

func (p parser) boolOr(n *yaml.Node, def bool) (bool, error) {
	if n == nil {
		return def, nil
	}
	s, ok := p.literal(n)
	if !ok {
		return def, fmt.Errorf("got %s at line %d, want true or false", describe(n), n.Line)
	}
	return strconv.ParseBool(s)
}

// Get walks mapping keys from n; nil if any is missing. Get, Pairs, Items
// and IsIntrinsic are the template walkers internal/deploy's checks share.
func Get(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// Pairs yields a mapping's keys and values (nothing for nil or a
// non-mapping).
func Pairs(n *yaml.Node) func(yield func(string, *yaml.Node) bool) {
	return func(yield func(string, *yaml.Node) bool) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !yield(n.Content[i].Value, n.Content[i+1]) {
				return
			}
		}
	}
}

// Items returns a sequence's elements, or a lone value as a list of one
// (CloudFormation accepts both for Action, Resource, Statement, Policies).
func Items(n *yaml.Node) []*yaml.Node {
	switch {
	case n == nil:
		return nil
	case n.Kind == yaml.SequenceNode && !IsIntrinsic(n):
		return n.Content
	default:
		return []*yaml.Node{n}
	}
}

func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode || IsIntrinsic(n) {
		return ""
	}
	return n.Value
}

// IsIntrinsic reports whether n is a short-form intrinsic (!Ref, !GetAtt, …).
func IsIntrinsic(n *yaml.Node) bool {
	return strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!")
}

// GetAtt returns (X, Y) for !GetAtt X.Y, !GetAtt [X, Y] or {Fn::GetAtt: ...}.
func GetAtt(n *yaml.Node) (id, attr string, ok bool) {
	if n == nil {
		return "", "", false
	}
	arg := n
	switch {
	case n.Tag == "!GetAtt":
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "Fn::GetAtt":
		arg = n.Content[1]
	default:
		return "", "", false
	}
	switch arg.Kind {
	case yaml.ScalarNode:
		id, attr, ok = strings.Cut(arg.Value, ".")
		return id, attr, ok
	case yaml.SequenceNode:
		if len(arg.Content) == 2 {
			return arg.Content[0].Value, arg.Content[1].Value, true
		}
	}
	return "", "", false
}

func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	if IsIntrinsic(n) {
		return n.Tag + " " + n.Value
	}
	return fmt.Sprintf("%q", n.Value)
}

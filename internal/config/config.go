// Package config reads the function's configuration from the environment
// and validates all of it at init: a missing or malformed value fails with
// one line naming the variable and what it expected.
package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsbatch"
)

// The environment variables, all in one place. Variables lists them for
// the checks that keep template.yaml and the README in step.
const (
	EnvTable             = "IDEMPOTENCY_TABLE"
	EnvNamespace         = "IDEMPOTENCY_NAMESPACE"
	EnvTTL               = "IDEMPOTENCY_TTL"
	EnvLease             = "IDEMPOTENCY_LEASE"
	EnvMaxAttempts       = "IDEMPOTENCY_MAX_ATTEMPTS"
	EnvBackoffBase       = "IDEMPOTENCY_BACKOFF_BASE"
	EnvBackoffMax        = "IDEMPOTENCY_BACKOFF_MAX"
	EnvKeyJMESPath       = "IDEMPOTENCY_KEY_JMESPATH"
	EnvPayloadJMESPath   = "IDEMPOTENCY_PAYLOAD_JMESPATH"
	EnvMaxConcurrency    = "MAX_CONCURRENCY"
	EnvDownstreamURL     = "DOWNSTREAM_URL"
	EnvNotifyTimeout     = "NOTIFY_TIMEOUT"
	EnvTransientStatuses = "NOTIFY_TRANSIENT_STATUSES"
	EnvFunctionName      = "AWS_LAMBDA_FUNCTION_NAME" // set by Lambda; the default namespace
)

// Variables are the variables the function reads (Lambda's own excluded).
var Variables = []string{
	EnvTable, EnvNamespace, EnvTTL, EnvLease, EnvMaxAttempts, EnvBackoffBase, EnvBackoffMax,
	EnvKeyJMESPath, EnvPayloadJMESPath, EnvMaxConcurrency, EnvDownstreamURL, EnvNotifyTimeout, EnvTransientStatuses,
}

// Config is the validated configuration.
type Config struct {
	Table             string
	Namespace         string
	TTL               time.Duration
	Lease             time.Duration // 0: up to the invocation deadline
	Retry             idem.RetryPolicy
	KeyExpression     string
	PayloadExpression string
	MaxConcurrency    int
	DownstreamURL     string
	NotifyTimeout     time.Duration
	TransientStatuses map[int]bool
}

// Defaults for the variables that have one.
const (
	DefaultTTL           = 24 * time.Hour
	DefaultMaxAttempts   = 3
	DefaultBackoffBase   = 100 * time.Millisecond
	DefaultBackoffMax    = 2 * time.Second
	DefaultConcurrency   = 10
	DefaultNotifyTimeout = 5 * time.Second
)

// Load reads the configuration through getenv (os.Getenv in production).
// It reports the first problem as one line naming the variable.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	c := Config{
		Table:             p.required(EnvTable),
		Namespace:         getenv(EnvNamespace),
		TTL:               p.duration(EnvTTL, DefaultTTL),
		Lease:             p.duration(EnvLease, 0),
		KeyExpression:     getenv(EnvKeyJMESPath),
		PayloadExpression: getenv(EnvPayloadJMESPath),
		MaxConcurrency:    p.positiveInt(EnvMaxConcurrency, DefaultConcurrency),
		DownstreamURL:     p.url(EnvDownstreamURL),
		NotifyTimeout:     p.duration(EnvNotifyTimeout, DefaultNotifyTimeout),
		TransientStatuses: p.statuses(EnvTransientStatuses),
		Retry: idem.RetryPolicy{
			MaxAttempts: p.positiveInt(EnvMaxAttempts, DefaultMaxAttempts),
			Base:        p.duration(EnvBackoffBase, DefaultBackoffBase),
			Max:         p.duration(EnvBackoffMax, DefaultBackoffMax),
			Jitter:      0.2,
		},
	}
	if c.Namespace == "" {
		c.Namespace = getenv(EnvFunctionName)
	}
	if p.err == nil && (c.Namespace == "" || strings.Contains(c.Namespace, "#")) {
		p.fail(EnvNamespace, "a name without '#' (it defaults to AWS_LAMBDA_FUNCTION_NAME, which is not set either)", c.Namespace)
	}
	if minLease := c.NotifyTimeout + idem.DefaultSafetyMargin; p.err == nil && c.Lease != 0 && c.Lease <= minLease {
		p.fail(EnvLease, fmt.Sprintf("a duration above NOTIFY_TIMEOUT + %v (%v), or unset", idem.DefaultSafetyMargin, minLease), c.Lease.String())
	}
	if p.err == nil && c.Retry.Max < c.Retry.Base {
		p.fail(EnvBackoffMax, fmt.Sprintf("a duration at least %s (%v)", EnvBackoffBase, c.Retry.Base), c.Retry.Max.String())
	}
	if p.err == nil {
		if err := sqsbatch.CompileExpressions(c.KeyExpression, c.PayloadExpression); err != nil {
			p.err = fmt.Errorf("config: %s or %s: %w", EnvKeyJMESPath, EnvPayloadJMESPath, err)
		}
	}
	return c, p.err
}

type parser struct {
	getenv func(string) string
	err    error
}

func (p *parser) fail(name, want, got string) {
	if p.err == nil {
		p.err = fmt.Errorf("config: %s: want %s, got %q", name, want, got)
	}
}

func (p *parser) required(name string) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		p.fail(name, "a value (it is required)", v)
	}
	return v
}

func (p *parser) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(name, "a positive Go duration such as 500ms, 3s or 24h", v)
		return def
	}
	return d
}

func (p *parser) positiveInt(name string, def int) int {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		p.fail(name, "a positive whole number", v)
		return def
	}
	return n
}

func (p *parser) url(name string) string {
	v := p.required(name)
	if v == "" {
		return v
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.fail(name, "an http or https URL", v)
	}
	return v
}

func (p *parser) statuses(name string) map[int]bool {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return nil // the classifier's default: 429, 502, 503, 504
	}
	out := map[int]bool{}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 400 || n > 599 {
			p.fail(name, "a comma-separated list of HTTP statuses from 400 to 599", v)
			return nil
		}
		out[n] = true
	}
	return out
}

// Runtime is how the function tunes the Go runtime at start. The function
// is I/O-bound (DynamoDB and webhook round trips), and `make bench` measured
// one P and a lazier collector to cut CPU per event by about a quarter
// (BENCHMARKS.md). The operator's own GOMAXPROCS, GOGC or GOMEMLIMIT always
// wins.
type Runtime struct {
	MaxProcs    int   // runtime.GOMAXPROCS; 0 leaves it
	GCPercent   int   // debug.SetGCPercent; 0 leaves it
	MemoryLimit int64 // debug.SetMemoryLimit, bytes; 0 leaves it
}

// Runtime defaults, applied only when the Go variable is unset.
const (
	DefaultMaxProcs  = 1
	DefaultGCPercent = 200
	// MemoryLimitShare is the share of the function's memory
	// (AWS_LAMBDA_FUNCTION_MEMORY_SIZE) given to GOMEMLIMIT, so the lazier
	// collector still works hard before Lambda's limit is reached.
	MemoryLimitShare = 0.9
	EnvMemorySize    = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" // set by Lambda, in MB
)

// RuntimeSettings returns the runtime settings to apply for this
// environment. A malformed AWS_LAMBDA_FUNCTION_MEMORY_SIZE sets no limit
// rather than failing: it is Lambda's variable, not the operator's.
func RuntimeSettings(getenv func(string) string) Runtime {
	var r Runtime
	if getenv("GOMAXPROCS") == "" {
		r.MaxProcs = DefaultMaxProcs
	}
	if getenv("GOGC") == "" {
		r.GCPercent = DefaultGCPercent
	}
	if mb, err := strconv.ParseInt(getenv(EnvMemorySize), 10, 64); err == nil && mb > 0 && getenv("GOMEMLIMIT") == "" {
		r.MemoryLimit = int64(float64(mb<<20) * MemoryLimitShare)
	}
	return r
}

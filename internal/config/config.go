// Package config reads the function's configuration from the environment
// and validates all of it at init: a missing or malformed value fails with
// one line naming the variable and what it expected.
//
// A number or a duration left unset stays zero, for the package that uses
// it to default (idem, notify, sqsvisibility, secretsource, inbound), and
// the cross-checks ask those packages (idem.Budget, eventkey). What config
// decides itself is which parts of the function run, and how:
//   - the switches' and choices' defaults: ACTION is notify,
//     WEBHOOK_SIGNING and SQS_BACKOFF are on, INBOUND_WEBHOOKS is off, and
//     IDEMPOTENCY_NAMESPACE is the function's name;
//   - ACTION=ledger delivers nothing, so it turns signing off and needs no
//     WEBHOOK_SECRET;
//   - retries jitter by idem.DefaultJitter, which no variable sets (the
//     zero RetryPolicy has none, so tests assert exact delays);
//   - the Go runtime's settings ([RuntimeSettings]).
package config

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/keyexpr"
)

// The environment variables, all in one place. Variables lists them for
// the checks that keep template.yaml and the docs in step.
const (
	EnvTable               = "IDEMPOTENCY_TABLE"
	EnvNamespace           = "IDEMPOTENCY_NAMESPACE"
	EnvTTL                 = "IDEMPOTENCY_TTL"
	EnvLease               = "IDEMPOTENCY_LEASE"
	EnvAttemptsPerDelivery = "IDEMPOTENCY_ATTEMPTS_PER_DELIVERY"
	EnvAttemptsPerKey      = "IDEMPOTENCY_ATTEMPTS_PER_KEY"
	EnvBackoffBase         = "IDEMPOTENCY_BACKOFF_BASE"
	EnvBackoffMax          = "IDEMPOTENCY_BACKOFF_MAX"
	EnvKeyJMESPath         = "IDEMPOTENCY_KEY_JMESPATH"
	EnvPayloadJMESPath     = "IDEMPOTENCY_PAYLOAD_JMESPATH"
	EnvMaxConcurrency      = "MAX_CONCURRENCY"
	EnvQueueBackoff        = "SQS_BACKOFF"
	EnvQueueBackoffBase    = "SQS_BACKOFF_BASE"
	EnvQueueBackoffMax     = "SQS_BACKOFF_MAX"
	EnvMaxBodyBytes        = "MAX_BODY_BYTES"
	EnvDownstreamURL       = "DOWNSTREAM_URL"
	EnvDownstreamURLSecret = "DOWNSTREAM_URL_SECRET"
	EnvJWTIssuer           = "JWT_ISSUER"
	EnvNotifyTimeout       = "NOTIFY_TIMEOUT"
	EnvTransientStatuses   = "NOTIFY_TRANSIENT_STATUSES"
	EnvAction              = "ACTION"
	EnvLedgerTable         = "LEDGER_TABLE"
	EnvWebhookSigning      = "WEBHOOK_SIGNING"
	EnvWebhookSecret       = "WEBHOOK_SECRET"
	EnvWebhookRefresh      = "WEBHOOK_SECRET_REFRESH"
	EnvInboundWebhooks     = "INBOUND_WEBHOOKS"
	EnvInboundSources      = "INBOUND_SOURCES_SECRET"
	EnvInboundRefresh      = "INBOUND_SOURCES_REFRESH"
	EnvInboundQueueURL     = "INBOUND_QUEUE_URL"
	EnvInboundTolerance    = "INBOUND_TOLERANCE"
	EnvInboundProofSecret  = "INBOUND_PROOF_SECRET"
	EnvInboundProofSince   = "INBOUND_PROOF_SINCE"
	EnvFunctionName        = "AWS_LAMBDA_FUNCTION_NAME" // set by Lambda; the default namespace
)

// Retired variables, with what replaced them. A retired variable in the
// environment fails init: keeping a name with a new meaning would silently
// change a deployment.
var Retired = map[string]string{
	"IDEMPOTENCY_MAX_ATTEMPTS": "it is no longer read: set " + EnvAttemptsPerDelivery +
		" (attempts within one delivery, default 3) and, only to cap attempts across deliveries, " +
		EnvAttemptsPerKey + " (unset by default: the queue's redrive policy and DLQ decide when to give up)",
}

// Variables are the variables the function reads (Lambda's own excluded).
var Variables = []string{
	EnvTable, EnvNamespace, EnvTTL, EnvLease, EnvAttemptsPerDelivery, EnvAttemptsPerKey, EnvBackoffBase, EnvBackoffMax,
	EnvKeyJMESPath, EnvPayloadJMESPath, EnvMaxConcurrency, EnvQueueBackoff, EnvQueueBackoffBase, EnvQueueBackoffMax,
	EnvMaxBodyBytes, EnvAction, EnvLedgerTable, EnvDownstreamURL, EnvDownstreamURLSecret, EnvNotifyTimeout, EnvTransientStatuses,
	EnvWebhookSigning, EnvWebhookSecret, EnvWebhookRefresh, EnvJWTIssuer,
	EnvInboundWebhooks, EnvInboundSources, EnvInboundRefresh, EnvInboundQueueURL, EnvInboundTolerance,
	EnvInboundProofSecret, EnvInboundProofSince,
}

// MaxInboundTolerance bounds INBOUND_TOLERANCE: a wider window lets a
// captured delivery be replayed for longer (the record still stops it
// running twice within the retention).
const MaxInboundTolerance = time.Hour

// The actions the function can run (ACTION).
const (
	ActionNotify = "notify" // a webhook delivery (the default)
	ActionLedger = "ledger" // a ledger entry, committed with the record
)

// Config is the validated configuration. A zero number or duration was not
// set: the package that owns the setting applies its own default
// (documented there and in docs/configuration.md), so no default is
// written twice. The switches, Action, Namespace and Retry.Jitter hold
// config's own defaults (see the package doc).
type Config struct {
	Table          string
	Namespace      string
	TTL            time.Duration
	Lease          time.Duration // 0: up to the invocation deadline
	Retry          idem.RetryPolicy
	Keys           *keyexpr.Extractor
	MaxConcurrency int
	QueueBackoff   QueueBackoff
	MaxBodyBytes   int
	Action         string // ActionNotify or ActionLedger
	LedgerTable    string
	// DownstreamURL is the plain variable (local runs); DownstreamURLSecret
	// the Secrets Manager secret holding the URL (deployments), read at
	// init. Exactly one is set with ACTION=notify.
	DownstreamURL       string
	DownstreamURLSecret string
	// JWTIssuer is the issuer the API's JWT authorizer accepts (see
	// apigw.Options.JWTIssuer).
	JWTIssuer         string
	NotifyTimeout     time.Duration
	TransientStatuses map[int]bool
	Signing           Signing
	Inbound           Inbound
	Proof             Proof
}

// SentPause is the engine's pause after a request that may have reached
// its receiver (idem.Options.SentPause), the one number the wiring, the
// deploy check and the docs read: for notify, the request's timeout
// (NOTIFY_TIMEOUT), so that a receiver still working on a POST that timed
// out gets as long again before the next one; for the ledger, which sends
// no request, none.
func (c Config) SentPause() time.Duration {
	if c.Action != ActionNotify {
		return 0
	}
	return cmp.Or(c.NotifyTimeout, notify.DefaultTimeout)
}

// Inbound is the receiving route POST /webhooks/{source}, as configured.
type Inbound struct {
	On        bool
	Secret    string        // the sources secret's ARN or name
	Refresh   time.Duration // re-read interval; 0: secretsource's default
	QueueURL  string        // the standard events queue
	Tolerance time.Duration // 0: inbound.DefaultTolerance
}

// Proof is the inbound envelope proof (docs/inbound-webhooks.md): the
// receiving route proves each envelope it queues with the secret's live
// keys; the queue path accepts an envelope only with a proof, or without
// one if SQS received it before Since. It is read whether or not the route
// is on here: the queue function, which has no route, checks the proofs.
type Proof struct {
	// Secret is the proof secret's ARN or name (INBOUND_PROOF_SECRET):
	// required with INBOUND_WEBHOOKS=on; on the queue function, unset
	// leaves no proof checkable (envelopes are judged as unproved).
	Secret string
	// Since is the cutover (INBOUND_PROOF_SINCE, RFC 3339): an envelope
	// without a proof, sent at or after it, is refused. Zero (unset): none
	// is, as before proofs existed.
	Since time.Time
}

// Signing is how deliveries are signed (Standard Webhooks).
type Signing struct {
	Off     bool
	Secret  string        // the Secrets Manager secret's ARN or name
	Refresh time.Duration // re-read interval; 0: secretsource's default
}

// QueueBackoff is the SQS visibility backoff as configured.
type QueueBackoff struct {
	Off       bool
	Base, Max time.Duration
}

// Load reads the configuration through getenv (os.Getenv in production).
// It reports the first problem as one line naming the variable.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	p.retired()
	c := p.settings()
	p.action(&c)
	if p.err == nil && !c.Signing.Off && c.Signing.Secret == "" {
		p.fail(EnvWebhookSecret, "the ARN or name of the Secrets Manager secret that signs deliveries (or WEBHOOK_SIGNING=off, which docs/security.md explains)", "")
	}
	c.Inbound = p.inbound()
	c.Proof = p.proof(c.Inbound.On)
	c.Namespace = p.namespace()
	p.crossCheck(c)
	if p.err == nil {
		c.Keys = p.keys()
	}
	return c, p.err
}

// retired fails on a retired variable that is set.
func (p *parser) retired() {
	for _, name := range slices.Sorted(maps.Keys(Retired)) {
		if p.getenv(name) != "" {
			p.err = fmt.Errorf("config: %s: %s", name, Retired[name])
		}
	}
}

// settings reads every setting that stands alone.
func (p *parser) settings() Config {
	return Config{
		Table: p.required(EnvTable),
		TTL:   p.duration(EnvTTL),
		Lease: p.duration(EnvLease),
		Retry: idem.RetryPolicy{
			AttemptsPerDelivery: p.positiveInt(EnvAttemptsPerDelivery),
			AttemptsPerKey:      p.positiveInt(EnvAttemptsPerKey),
			Base:                p.duration(EnvBackoffBase),
			Max:                 p.duration(EnvBackoffMax),
			Jitter:              idem.DefaultJitter,
		},
		MaxConcurrency:    p.positiveInt(EnvMaxConcurrency),
		QueueBackoff:      QueueBackoff{Off: !p.onOff(EnvQueueBackoff), Base: p.duration(EnvQueueBackoffBase), Max: p.duration(EnvQueueBackoffMax)},
		MaxBodyBytes:      p.positiveInt(EnvMaxBodyBytes),
		Action:            p.oneOf(EnvAction, ActionNotify, ActionLedger),
		NotifyTimeout:     p.duration(EnvNotifyTimeout),
		TransientStatuses: p.statuses(EnvTransientStatuses),
		JWTIssuer:         strings.TrimSpace(p.getenv(EnvJWTIssuer)),
		Signing:           Signing{Off: !p.onOff(EnvWebhookSigning), Secret: strings.TrimSpace(p.getenv(EnvWebhookSecret)), Refresh: p.duration(EnvWebhookRefresh)},
	}
}

// action reads what the chosen action needs: notify's downstream URL, from
// exactly one source; the ledger's table (the ledger delivers nothing, so
// nothing is signed).
func (p *parser) action(c *Config) {
	switch c.Action {
	case ActionNotify:
		c.DownstreamURL, c.DownstreamURLSecret = strings.TrimSpace(p.getenv(EnvDownstreamURL)), strings.TrimSpace(p.getenv(EnvDownstreamURLSecret))
		switch {
		case c.DownstreamURL != "" && c.DownstreamURLSecret != "":
			p.fail(EnvDownstreamURL, "unset when "+EnvDownstreamURLSecret+" is set (one source for the URL)", "<set>")
		case c.DownstreamURL == "" && c.DownstreamURLSecret == "":
			p.fail(EnvDownstreamURLSecret, "the ARN or name of the Secrets Manager secret holding the downstream URL (or, for local runs, "+EnvDownstreamURL+")", "")
		case c.DownstreamURL != "":
			if err := CheckDownstreamURL(c.DownstreamURL); err != nil && p.err == nil {
				p.err = fmt.Errorf("config: %s: %w", EnvDownstreamURL, err)
			}
		}
	case ActionLedger:
		c.LedgerTable = p.required(EnvLedgerTable)
		c.Signing = Signing{Off: true}
	}
}

// namespace returns IDEMPOTENCY_NAMESPACE, the function's name when unset.
func (p *parser) namespace() string {
	ns := cmp.Or(p.getenv(EnvNamespace), p.getenv(EnvFunctionName))
	if p.err == nil && (ns == "" || strings.Contains(ns, "#")) {
		p.fail(EnvNamespace, "a name without '#' (it defaults to AWS_LAMBDA_FUNCTION_NAME, which is not set either)", ns)
	}
	return ns
}

// crossCheck checks the settings that bound one another, asking their
// owners for the defaults of those left unset.
func (p *parser) crossCheck(c Config) {
	if p.err == nil && c.Lease != 0 && c.Action == ActionNotify {
		// A lease must hold one whole request plus the completion write.
		timeout := cmp.Or(c.NotifyTimeout, notify.DefaultTimeout)
		if work := (idem.Budget{}).LeaseWorkTime(c.Lease); work < timeout {
			p.fail(EnvLease, fmt.Sprintf("a duration of at least NOTIFY_TIMEOUT + %v (%v), or unset", c.Lease-work, timeout+c.Lease-work), c.Lease.String())
		}
	}
	if p.err == nil && c.Retry.Max != 0 && c.Retry.Max < cmp.Or(c.Retry.Base, idem.DefaultBackoffBase) {
		p.fail(EnvBackoffMax, fmt.Sprintf("a duration at least %s (%v)", EnvBackoffBase, cmp.Or(c.Retry.Base, idem.DefaultBackoffBase)), c.Retry.Max.String())
	}
	if p.err == nil && c.QueueBackoff.Max != 0 && c.QueueBackoff.Max < cmp.Or(c.QueueBackoff.Base, sqsvisibility.DefaultBase) {
		p.fail(EnvQueueBackoffMax, fmt.Sprintf("a duration at least %s (%v)", EnvQueueBackoffBase, cmp.Or(c.QueueBackoff.Base, sqsvisibility.DefaultBase)), c.QueueBackoff.Max.String())
	}
	if p.err == nil && c.QueueBackoff.Max > sqsvisibility.MaxVisibility {
		p.fail(EnvQueueBackoffMax, fmt.Sprintf("at most %v (SQS's visibility limit)", sqsvisibility.MaxVisibility), c.QueueBackoff.Max.String())
	}
}

// keys builds the key and fingerprint expressions.
func (p *parser) keys() *keyexpr.Extractor {
	keys, err := keyexpr.New(p.getenv(EnvKeyJMESPath), p.getenv(EnvPayloadJMESPath))
	if err != nil {
		p.err = fmt.Errorf("config: %s or %s: %w", EnvKeyJMESPath, EnvPayloadJMESPath, err)
	}
	return keys
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

// duration returns 0 when name is unset.
func (p *parser) duration(name string) time.Duration {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		p.fail(name, "a positive Go duration such as 500ms, 3s or 24h", v)
		return 0
	}
	return d
}

// positiveInt returns 0 when name is unset.
func (p *parser) positiveInt(name string) int {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		p.fail(name, "a positive whole number", v)
		return 0
	}
	return n
}

// oneOf returns the value of name, the first choice when unset.
func (p *parser) oneOf(name string, choices ...string) string {
	v := strings.ToLower(strings.TrimSpace(p.getenv(name)))
	if v == "" {
		return choices[0]
	}
	if !slices.Contains(choices, v) {
		p.fail(name, "one of "+strings.Join(choices, ", "), v)
		return choices[0]
	}
	return v
}

// inbound reads the receiving route's variables; when it is off, the
// others are not read.
func (p *parser) inbound() Inbound {
	if !p.onOffDefault(EnvInboundWebhooks, false) {
		return Inbound{}
	}
	in := Inbound{On: true, Secret: strings.TrimSpace(p.getenv(EnvInboundSources)), Refresh: p.duration(EnvInboundRefresh),
		QueueURL: p.queueURL(EnvInboundQueueURL), Tolerance: p.duration(EnvInboundTolerance)}
	if in.Secret == "" {
		p.fail(EnvInboundSources, "the ARN or name of the Secrets Manager secret that lists the webhook sources (INBOUND_WEBHOOKS is on)", "")
	}
	if strings.HasSuffix(in.QueueURL, ".fifo") {
		p.fail(EnvInboundQueueURL, "the standard events queue's URL (a FIFO queue needs a message group per message)", in.QueueURL)
	}
	if in.Tolerance > MaxInboundTolerance {
		p.fail(EnvInboundTolerance, fmt.Sprintf("at most %v (a wider window lets a captured delivery be replayed for longer)", MaxInboundTolerance), in.Tolerance.String())
	}
	return in
}

// proof reads the envelope proof's variables: the secret is required
// when the route is on (its envelopes are refused after the cutover
// without a proof).
func (p *parser) proof(routeOn bool) Proof {
	pr := Proof{Secret: strings.TrimSpace(p.getenv(EnvInboundProofSecret))}
	if routeOn && pr.Secret == "" {
		p.fail(EnvInboundProofSecret, "the ARN or name of the Secrets Manager secret that proves envelopes to the queue function (INBOUND_WEBHOOKS is on)", "")
	}
	if v := strings.TrimSpace(p.getenv(EnvInboundProofSince)); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			p.fail(EnvInboundProofSince, "an RFC 3339 time such as 2026-03-01T12:00:00Z (the cutover: envelopes queued after it need a proof), or unset", v)
		}
		pr.Since = t
	}
	return pr
}

// queueURL returns an SQS queue URL: an http or https URL with a host.
func (p *parser) queueURL(name string) string {
	v := p.required(name)
	if v == "" {
		return v
	}
	if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.fail(name, "an http or https URL", v)
	}
	return v
}

// onOff returns true when name is unset, "on" or "off" giving the answer.
func (p *parser) onOff(name string) bool { return p.onOffDefault(name, true) }

// onOffDefault returns def when name is unset, "on" or "off" giving the
// answer.
func (p *parser) onOffDefault(name string, def bool) bool {
	switch v := strings.ToLower(strings.TrimSpace(p.getenv(name))); v {
	case "":
		return def
	case "on":
		return true
	case "off":
		return false
	default:
		p.fail(name, "on or off", v)
		return true
	}
}

// CheckDownstreamURL reports whether raw is an http or https URL with a
// host. Its error shows the value by its scheme and host only
// (notify.RedactURL): a webhook URL's user info, path and query are often
// credentials (the URL may come from a secret).
func CheckDownstreamURL(raw string) error {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http or https URL with a host, got %s (user info, path and query not repeated: they may hold a credential)", notify.RedactURL(raw))
	}
	return nil
}

// PlainHTTPWarning returns the init warning for a downstream reached over
// plain http outside a local run (deliveries and their signatures would
// cross the network readable and alterable), or "" when there is none. A
// local run is `sam local` (AWS_SAM_LOCAL=true) or a downstream on this
// machine (localhost or a loopback address). The warning names the scheme
// and host only.
func PlainHTTPWarning(raw string, getenv func(string) string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme != "http" || getenv("AWS_SAM_LOCAL") == "true" {
		return ""
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host == "localhost" || strings.HasSuffix(host, ".localhost") || (ip != nil && ip.IsLoopback()) {
		return ""
	}
	return "the downstream is plain http (" + u.Scheme + "://" + u.Host + "): deliveries, their signatures and replies cross the network unencrypted; use https"
}

func (p *parser) statuses(name string) map[int]bool {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		return nil // the classifier's defaults only: 429, 502, 503, 504
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
//
// Under Lambda Managed Instances (AWS_LAMBDA_MAX_CONCURRENCY above 1) one
// process serves that many invocations at once, on the vCPUs of its
// execution environment: GOMAXPROCS is left to Go, which sizes it to the
// CPUs the process may use (its cgroup's limit, since Go 1.25), because one
// P would make every concurrent invocation share one core (`make bench`'s
// section 6 measures both at 8 concurrent invocations). GOMEMLIMIT stays at
// a share of AWS_LAMBDA_FUNCTION_MEMORY_SIZE, which there is the memory of
// the whole execution environment, shared by its concurrent invocations:
// one Go heap holds them all.
type Runtime struct {
	MaxProcs    int   // runtime.GOMAXPROCS; 0 leaves it
	GCPercent   int   // debug.SetGCPercent; 0 leaves it
	MemoryLimit int64 // debug.SetMemoryLimit, bytes; 0 leaves it
}

// Runtime defaults, applied only when the Go variable is unset.
const (
	// DefaultMaxProcs applies when the process serves one invocation at a
	// time (AWS_LAMBDA_MAX_CONCURRENCY unset or 1).
	DefaultMaxProcs  = 1
	DefaultGCPercent = 200
	// MemoryLimitShare is the share of the function's memory
	// (AWS_LAMBDA_FUNCTION_MEMORY_SIZE) given to GOMEMLIMIT, so the lazier
	// collector still works hard before Lambda's limit is reached.
	MemoryLimitShare = 0.9
	EnvMemorySize    = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" // set by Lambda, in MB
	// EnvLambdaMaxConcurrency is set by Lambda Managed Instances: the
	// invocations one process serves at once (aws-lambda-go runs that many
	// invoke loops).
	EnvLambdaMaxConcurrency = "AWS_LAMBDA_MAX_CONCURRENCY"
)

// RuntimeSettings returns the runtime settings to apply for this
// environment. A malformed AWS_LAMBDA_FUNCTION_MEMORY_SIZE sets no limit
// rather than failing: it is Lambda's variable, not the operator's; a
// malformed AWS_LAMBDA_MAX_CONCURRENCY counts as 1, as aws-lambda-go reads
// it.
func RuntimeSettings(getenv func(string) string) Runtime {
	var r Runtime
	concurrent := false
	if n, err := strconv.Atoi(getenv(EnvLambdaMaxConcurrency)); err == nil && n > 1 {
		concurrent = true
	}
	if getenv("GOMAXPROCS") == "" && !concurrent {
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

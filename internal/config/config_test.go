package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func base() map[string]string {
	return map[string]string{EnvTable: "idem", EnvDownstreamURL: "https://hooks.example/x", EnvFunctionName: "notify-fn", EnvWebhookSecret: "arn:aws:secretsmanager:us-east-1:1:secret:wh"}
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(env(base()))
	if err != nil {
		t.Fatal(err)
	}
	// Unset values stay zero: their owners default them, once.
	want := Config{
		Table: "idem", Namespace: "notify-fn", DownstreamURL: "https://hooks.example/x", Action: ActionNotify,
		Retry:   idem.RetryPolicy{Jitter: idem.DefaultJitter},
		Signing: Signing{Secret: "arn:aws:secretsmanager:us-east-1:1:secret:wh"},
	}
	if diff := cmp.Diff(want, c, cmpopts.IgnoreFields(Config{}, "Keys")); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if c.Keys == nil {
		t.Errorf("no key extractor for the default expression")
	}
}

func TestLoadEverything(t *testing.T) {
	m := base()
	for k, v := range map[string]string{
		EnvNamespace: "orders", EnvTTL: "48h", EnvLease: "30s", EnvAttemptsPerDelivery: "5", EnvAttemptsPerKey: "20",
		EnvBackoffBase: "50ms", EnvBackoffMax: "1s", EnvKeyJMESPath: "['evt', detail.id, 'ship']", EnvPayloadJMESPath: "detail",
		EnvMaxConcurrency: "4", EnvQueueBackoff: "OFF", EnvQueueBackoffBase: "5s", EnvQueueBackoffMax: "10m", EnvMaxBodyBytes: "65536",
		EnvNotifyTimeout: "1500ms", EnvTransientStatuses: "429, 500,503", EnvWebhookSigning: "off", EnvWebhookRefresh: "1m",
		EnvJWTIssuer: "https://issuer.example",
	} {
		m[k] = v
	}
	c, err := Load(env(m))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Table: "idem", Namespace: "orders", TTL: 48 * time.Hour, Lease: 30 * time.Second, DownstreamURL: "https://hooks.example/x", Action: ActionNotify,
		Retry:          idem.RetryPolicy{AttemptsPerDelivery: 5, AttemptsPerKey: 20, Base: 50 * time.Millisecond, Max: time.Second, Jitter: idem.DefaultJitter},
		MaxConcurrency: 4, QueueBackoff: QueueBackoff{Off: true, Base: 5 * time.Second, Max: 10 * time.Minute}, MaxBodyBytes: 65536,
		NotifyTimeout: 1500 * time.Millisecond, TransientStatuses: map[int]bool{429: true, 500: true, 503: true},
		Signing: Signing{Off: true, Secret: "arn:aws:secretsmanager:us-east-1:1:secret:wh", Refresh: time.Minute}, JWTIssuer: "https://issuer.example",
	}
	if diff := cmp.Diff(want, c, cmpopts.IgnoreFields(Config{}, "Keys")); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	req, err := c.Keys.Request([]byte(`{"detail":{"id":"o-9"}}`))
	if err != nil || req.Key != "evt:o-9:ship" {
		t.Errorf("key expression not applied: %+v %v", req, err)
	}
}

// TestTransientStatusesSettingAddsToTheDefaults: NOTIFY_TRANSIENT_STATUSES=500,
// read and handed to notify as the handler does, leaves 429, 502, 503 and
// 504 transient: an outage must never be stored as permanent failures.
func TestTransientStatusesSettingAddsToTheDefaults(t *testing.T) {
	m := base()
	m[EnvTransientStatuses] = "500"
	c, err := Load(env(m))
	if err != nil {
		t.Fatal(err)
	}
	classes := notify.Classifier{Transient: c.TransientStatuses}
	for _, status := range []int{500, 429, 502, 503, 504} {
		if got := classes.Class(status); got != idem.ClassTransient {
			t.Errorf("NOTIFY_TRANSIENT_STATUSES=500: %d is %v; want transient", status, got)
		}
	}
	if got := classes.Class(501); got != idem.ClassPermanent {
		t.Errorf("NOTIFY_TRANSIENT_STATUSES=500: 501 is %v; want permanent", got)
	}
}

// TestDownstreamURLIsRedactedInErrors: an invalid DOWNSTREAM_URL's init
// error shows its scheme and host only, never its user info, path, query
// or fragment (a webhook URL's credentials).
func TestDownstreamURLIsRedactedInErrors(t *testing.T) {
	secrets := []string{"deploy", "hunter2", "s3cr3t", "tok3n", "fr4g"}
	for _, tt := range []struct{ url, shows string }{
		{"ftp://deploy:hunter2@hooks.example:8443/s3cr3t?token=tok3n#fr4g", "got ftp://hooks.example:8443 "},
		{"https://deploy:hunter2@hooks.example/s3cr3t%zz?token=tok3n#fr4g", "not a URL"}, // a bad escape: url.Parse fails
		{"hooks.example/s3cr3t?token=tok3n&user=deploy:hunter2#fr4g", "not a URL"},       // no scheme
		{"https:///s3cr3t?token=tok3n&u=deploy:hunter2#fr4g", "not a URL"},               // no host
		{"javascript:deploy:hunter2@hooks.example/s3cr3t?tok3n#fr4g", "not a URL"},       // opaque
		{"HTTP s://deploy:hunter2@hooks.example/s3cr3t?token=tok3n#fr4g", "not a URL"},   // a space in the scheme
	} {
		m := base()
		m[EnvDownstreamURL] = tt.url
		_, err := Load(env(m))
		if err == nil || !strings.Contains(err.Error(), "config: DOWNSTREAM_URL: want an http or https URL") || !strings.Contains(err.Error(), tt.shows) {
			t.Errorf("%s: %v; want the variable named and %q", tt.url, err, tt.shows)
			continue
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error %q shows %q", tt.url, err, s)
			}
		}
	}
}

func TestLoadErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		name, key, value, want string
	}{
		{"table missing", EnvTable, "", "IDEMPOTENCY_TABLE: want a value"},
		{"url missing", EnvDownstreamURL, "", "DOWNSTREAM_URL_SECRET: want the ARN or name of the Secrets Manager secret holding the downstream URL (or, for local runs, DOWNSTREAM_URL)"},
		{"url not http", EnvDownstreamURL, "ftp://x", "DOWNSTREAM_URL: want an http or https URL"},
		{"url and its secret both set", EnvDownstreamURLSecret, "arn:aws:secretsmanager:us-east-1:1:secret:url", "DOWNSTREAM_URL: want unset when DOWNSTREAM_URL_SECRET is set"},
		{"ttl not a duration", EnvTTL, "24", `IDEMPOTENCY_TTL: want a positive Go duration such as 500ms, 3s or 24h, got "24"`},
		{"lease negative", EnvLease, "-1s", "IDEMPOTENCY_LEASE: want a positive Go duration"},
		{"attempts zero", EnvAttemptsPerDelivery, "0", "IDEMPOTENCY_ATTEMPTS_PER_DELIVERY: want a positive whole number"},
		{"key cap word", EnvAttemptsPerKey, "many", "IDEMPOTENCY_ATTEMPTS_PER_KEY: want a positive whole number"},
		{"retired max attempts", "IDEMPOTENCY_MAX_ATTEMPTS", "3", "IDEMPOTENCY_MAX_ATTEMPTS: it is no longer read: set IDEMPOTENCY_ATTEMPTS_PER_DELIVERY"},
		{"queue backoff switch", EnvQueueBackoff, "maybe", "SQS_BACKOFF: want on or off"},
		{"queue backoff max below base", EnvQueueBackoffMax, "1s", "SQS_BACKOFF_MAX: want a duration at least SQS_BACKOFF_BASE"},
		{"queue backoff beyond SQS", EnvQueueBackoffMax, "13h", "SQS_BACKOFF_MAX: want at most 12h0m0s"},
		{"body limit", EnvMaxBodyBytes, "-1", "MAX_BODY_BYTES: want a positive whole number"},
		{"no secret while signing", EnvWebhookSecret, "", "WEBHOOK_SECRET: want the ARN or name of the Secrets Manager secret"},
		{"unknown action", EnvAction, "email", "ACTION: want one of notify, ledger"},
		{"ledger without a table", EnvAction, "ledger", "LEDGER_TABLE: want a value"},
		{"signing switch", EnvWebhookSigning, "yes", "WEBHOOK_SIGNING: want on or off"},
		{"refresh", EnvWebhookRefresh, "often", "WEBHOOK_SECRET_REFRESH: want a positive Go duration"},
		{"concurrency word", EnvMaxConcurrency, "ten", "MAX_CONCURRENCY: want a positive whole number"},
		{"timeout", EnvNotifyTimeout, "5", "NOTIFY_TIMEOUT: want a positive Go duration"},
		{"backoff max below base", EnvBackoffMax, "1ms", "IDEMPOTENCY_BACKOFF_MAX: want a duration at least IDEMPOTENCY_BACKOFF_BASE"},
		{"statuses", EnvTransientStatuses, "429,abc", "NOTIFY_TRANSIENT_STATUSES: want a comma-separated list"},
		{"status out of range", EnvTransientStatuses, "200", "NOTIFY_TRANSIENT_STATUSES"},
		{"key expression", EnvKeyJMESPath, "join(", "IDEMPOTENCY_KEY_JMESPATH"},
		{"payload expression", EnvPayloadJMESPath, "[[", "IDEMPOTENCY_PAYLOAD_JMESPATH"},
		{"namespace with #", EnvNamespace, "a#b", "IDEMPOTENCY_NAMESPACE"},
		{"no namespace at all", EnvFunctionName, "", "IDEMPOTENCY_NAMESPACE"},
		{"lease shorter than a request", EnvLease, "5s", "IDEMPOTENCY_LEASE: want a duration of at least NOTIFY_TIMEOUT + 500ms (5.5s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			m[tt.key] = tt.value
			_, err := Load(env(m))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Load = %v; want one line containing %q", err, tt.want)
			}
		})
	}
}

// The ledger action needs its table, and no downstream or signing secret.
func TestLoadLedger(t *testing.T) {
	// A short lease is fine: no webhook request has to fit in it.
	c, err := Load(env(map[string]string{EnvTable: "idem", EnvFunctionName: "fn", EnvAction: "ledger", EnvLedgerTable: "ledger", EnvLease: "2s"}))
	if err != nil || c.Action != ActionLedger || c.LedgerTable != "ledger" || !c.Signing.Off || c.DownstreamURL != "" {
		t.Errorf("got %+v, %v; want the ledger action on table ledger", c, err)
	}
}

// A malformed downstream URL is refused without repeating it: its path and
// query may be a credential.
func TestABadURLIsNotRepeated(t *testing.T) {
	m := base()
	m[EnvDownstreamURL] = "hooks.example.com/T0/B0/s3cr3t-token"
	_, err := Load(env(m))
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), EnvDownstreamURL) {
		t.Errorf("Load = %v; want an error naming the variable, not the value", err)
	}
}

// The URL from a secret: the variable names the secret; the value is read
// at init by the wiring.
func TestLoadURLSecret(t *testing.T) {
	m := base()
	delete(m, EnvDownstreamURL)
	m[EnvDownstreamURLSecret] = "arn:aws:secretsmanager:us-east-1:111122223333:secret:url-AbC"
	c, err := Load(env(m))
	if err != nil || c.DownstreamURLSecret != m[EnvDownstreamURLSecret] || c.DownstreamURL != "" {
		t.Errorf("got %q %q, %v; want the secret's ARN only", c.DownstreamURLSecret, c.DownstreamURL, err)
	}
}

func TestPlainHTTPWarning(t *testing.T) {
	tests := []struct {
		name, url string
		env       map[string]string
		warns     bool
	}{
		{"https", "https://hooks.example.com/x", nil, false},
		{"plain http to another host", "http://hooks.example.com/T0/secret-path?token=abc", nil, true},
		{"plain http to an address", "http://10.0.0.7:8080/hook", nil, true},
		{"loopback", "http://127.0.0.1:8081/webhook", nil, false},
		{"ipv6 loopback", "http://[::1]:8081/webhook", nil, false},
		{"localhost", "http://localhost:8081/webhook", nil, false},
		{"sam local", "http://host.docker.internal:8081/webhook", map[string]string{"AWS_SAM_LOCAL": "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := PlainHTTPWarning(tt.url, func(k string) string { return tt.env[k] })
			if (w != "") != tt.warns {
				t.Fatalf("warning %q; want one: %v", w, tt.warns)
			}
			if strings.Contains(w, "secret-path") || strings.Contains(w, "token") {
				t.Errorf("warning %q repeats the URL's path or query", w)
			}
		})
	}
}

func TestRuntimeSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Runtime
	}{
		{"defaults outside Lambda", nil, Runtime{MaxProcs: 1, GCPercent: 200}},
		{"memory limit from the function's memory", map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256"},
			Runtime{MaxProcs: 1, GCPercent: 200, MemoryLimit: 241591910}},
		{"operator's GOMAXPROCS wins", map[string]string{"GOMAXPROCS": "4"}, Runtime{GCPercent: 200}},
		{"operator's GOGC wins, even off", map[string]string{"GOGC": "off"}, Runtime{MaxProcs: 1}},
		{"operator's GOMEMLIMIT wins", map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256", "GOMEMLIMIT": "100MiB"},
			Runtime{MaxProcs: 1, GCPercent: 200}},
		{"malformed memory size sets no limit", map[string]string{"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "lots"},
			Runtime{MaxProcs: 1, GCPercent: 200}},
		{"managed instances: GOMAXPROCS left to Go, the environment's memory limit", map[string]string{"AWS_LAMBDA_MAX_CONCURRENCY": "8", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "4096"},
			Runtime{GCPercent: 200, MemoryLimit: 3865470566}},
		{"managed instances with one invocation at a time: one P", map[string]string{"AWS_LAMBDA_MAX_CONCURRENCY": "1"},
			Runtime{MaxProcs: 1, GCPercent: 200}},
		{"malformed max concurrency counts as 1", map[string]string{"AWS_LAMBDA_MAX_CONCURRENCY": "many"},
			Runtime{MaxProcs: 1, GCPercent: 200}},
		{"managed instances: the operator's GOMAXPROCS still wins", map[string]string{"AWS_LAMBDA_MAX_CONCURRENCY": "64", "GOMAXPROCS": "1"},
			Runtime{GCPercent: 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RuntimeSettings(func(k string) string { return tt.env[k] })
			if got != tt.want {
				t.Errorf("RuntimeSettings(%v) = %+v; want %+v", tt.env, got, tt.want)
			}
		})
	}
}

// The receiving route is off unless INBOUND_WEBHOOKS=on; then its secret
// and a standard queue are required, and the tolerance is bounded.
func TestLoadInbound(t *testing.T) {
	m := base()
	m[EnvInboundSources], m[EnvInboundQueueURL] = "arn:aws:secretsmanager:us-east-1:1:secret:sources", "https://sqs.us-east-1.amazonaws.com/1/events"
	c, err := Load(env(m))
	if err != nil || c.Inbound != (Inbound{}) {
		t.Errorf("unset INBOUND_WEBHOOKS: %+v, %v; want the route off, nothing else read", c.Inbound, err)
	}
	m[EnvInboundWebhooks], m[EnvInboundTolerance], m[EnvInboundRefresh] = "ON", "2m", "30s"
	if _, err := Load(env(m)); err == nil || !strings.Contains(err.Error(), "INBOUND_PROOF_SECRET: want the ARN or name") {
		t.Errorf("the route on without a proof secret: %v; want INBOUND_PROOF_SECRET required", err)
	}
	m[EnvInboundProofSecret] = "arn:aws:secretsmanager:us-east-1:1:secret:proof"
	c, err = Load(env(m))
	want := Inbound{On: true, Secret: "arn:aws:secretsmanager:us-east-1:1:secret:sources", QueueURL: "https://sqs.us-east-1.amazonaws.com/1/events",
		Tolerance: 2 * time.Minute, Refresh: 30 * time.Second}
	if err != nil || c.Inbound != want {
		t.Errorf("got %+v, %v; want %+v", c.Inbound, err, want)
	}
	for _, tt := range []struct{ name, key, value, want string }{
		{"switch", EnvInboundWebhooks, "yes", "INBOUND_WEBHOOKS: want on or off"},
		{"no secret", EnvInboundSources, "", "INBOUND_SOURCES_SECRET: want the ARN or name"},
		{"no queue", EnvInboundQueueURL, "", "INBOUND_QUEUE_URL: want a value"},
		{"queue not a URL", EnvInboundQueueURL, "events", "INBOUND_QUEUE_URL: want an http or https URL"},
		{"FIFO queue", EnvInboundQueueURL, "https://sqs.us-east-1.amazonaws.com/1/events.fifo", "INBOUND_QUEUE_URL: want the standard events queue's URL"},
		{"tolerance beyond an hour", EnvInboundTolerance, "2h", "INBOUND_TOLERANCE: want at most 1h0m0s"},
		{"tolerance word", EnvInboundTolerance, "lax", "INBOUND_TOLERANCE: want a positive Go duration"},
		{"refresh", EnvInboundRefresh, "0s", "INBOUND_SOURCES_REFRESH: want a positive Go duration"},
		{"cutover not a time", EnvInboundProofSince, "yesterday", "INBOUND_PROOF_SINCE: want an RFC 3339 time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m2 := map[string]string{}
			for k, v := range m {
				m2[k] = v
			}
			m2[tt.key] = tt.value
			if _, err := Load(env(m2)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// The proof's variables are read with the route off too (the queue
// function checks proofs without serving the route); unset, no cutover.
func TestLoadProof(t *testing.T) {
	m := base()
	c, err := Load(env(m))
	if err != nil || c.Proof != (Proof{}) {
		t.Errorf("unset: %+v, %v; want no secret and no cutover", c.Proof, err)
	}
	m[EnvInboundProofSecret], m[EnvInboundProofSince] = "proof", "2026-03-01T12:00:00+01:00"
	c, err = Load(env(m))
	if want := (Proof{Secret: "proof", Since: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}); err != nil || c.Proof.Secret != want.Secret || !c.Proof.Since.Equal(want.Since) {
		t.Errorf("got %+v, %v; want %+v", c.Proof, err, want)
	}
}

// TestSentPause: the engine's pause after a sent request is the notify
// action's request timeout (its default when unset), and none for the
// ledger, which sends no request.
func TestSentPause(t *testing.T) {
	withTimeout := base()
	withTimeout[EnvNotifyTimeout] = "4s"
	ledger := map[string]string{EnvTable: "idem", EnvFunctionName: "fn", EnvAction: "ledger", EnvLedgerTable: "ledger"}
	for name, tc := range map[string]struct {
		env  map[string]string
		want time.Duration
	}{
		"notify, NOTIFY_TIMEOUT unset": {base(), notify.DefaultTimeout},
		"notify, NOTIFY_TIMEOUT 4s":    {withTimeout, 4 * time.Second},
		"ledger":                       {ledger, 0},
	} {
		c, err := Load(env(tc.env))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := c.SentPause(); got != tc.want {
			t.Errorf("%s: SentPause() = %v; want %v", name, got, tc.want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
)

// hang is a transport whose requests never get a reply: a DynamoDB that
// does not answer.
type hang struct{}

func (hang) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// TestProbeTable: at init, a misconfigured table fails the init with one
// line naming the table and DynamoDB's error code; an outage only warns.
func TestProbeTable(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	plain, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	table := ddblocal.NewTable(t, plain)
	other := ddblocal.NewTableKeyedBy(t, plain, "keyed-by-id", "id")
	faulty := func(k faults.Kind) http.RoundTripper {
		return &faults.Transport{Decide: func(*http.Request) faults.Kind { return k }, Replies: ddblocal.Replies}
	}
	tests := []struct {
		name      string
		table     string
		transport http.RoundTripper
		fails     string // the init error's text; "" when the init goes on
		warns     string // the warning's error code, when it goes on
	}{
		{name: "the table", table: table},
		{name: "a misspelled table", table: "idem-tabel", fails: `config: IDEMPOTENCY_TABLE: dynamodb GetItem on table "idem-tabel": ResourceNotFoundException: the table does not exist`},
		{name: "another key schema", table: other, fails: `config: IDEMPOTENCY_TABLE: dynamodb GetItem on table "keyed-by-id": ValidationException`},
		{name: "a denied permission", table: table, transport: faulty(faults.AccessDenied), fails: `dynamodb GetItem on table "` + table + `": AccessDeniedException: access denied: the function's role needs dynamodb:GetItem`},
		{name: "throttling", table: table, transport: faulty(faults.Throttle), warns: "ThrottlingException"},
		{name: "a server error", table: table, transport: faulty(faults.ServerError), warns: "InternalServerError"},
		{name: "no answer", table: table, transport: hang{}, warns: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ddblocal.Config(ep, tt.transport)
			cfg.RetryMaxAttempts = 1 // the SDK's retries would only make the outage cases slower
			client, _ := ddblocal.Client(cfg)
			store, err := dynamostore.New(client, tt.table, dynamostore.Options{Namespace: "fn"})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			// Only the hanging server needs the probe's timeout to end it; a
			// server that answers gets time to answer on a busy machine (at
			// 200 ms, a misspelled table under -race once timed out and only
			// warned).
			timeout := 10 * time.Second
			if _, ok := tt.transport.(hang); ok {
				timeout = 200 * time.Millisecond
			}
			start := time.Now()
			err = probeTable(context.Background(), store, slog.New(slog.NewJSONHandler(&logs, nil)), timeout)
			if took := time.Since(start); took > timeout+5*time.Second {
				t.Errorf("the probe took %v; want it bounded by its timeout", took)
			}
			switch {
			case tt.fails != "":
				if err == nil || !strings.Contains(err.Error(), tt.fails) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("got %v; want one line containing %q", err, tt.fails)
				}
			case err != nil:
				t.Fatalf("got %v; want the init to go on", err)
			case tt.warns == "":
				if logs.Len() != 0 {
					t.Errorf("logged %s; want nothing", logs.String())
				}
			default:
				var l struct {
					Level string
					Store struct {
						Table     string `json:"table"`
						ErrorCode string `json:"error_code"`
					} `json:"store"`
				}
				_ = json.Unmarshal(logs.Bytes(), &l)
				// The SDK names the code; a request cut short by the probe's
				// timeout is a timeout whatever came first.
				if l.Level != "WARN" || l.Store.Table != tt.table || (l.Store.ErrorCode != tt.warns && l.Store.ErrorCode != "timeout") {
					t.Errorf("logged %s; want a WARN naming the table and %s", logs.String(), tt.warns)
				}
			}
		})
	}
}

// TestReadSecrets: the secrets' first reads run at once within one budget;
// a permanent error fails the init with one line naming the variable, a
// transient one (an outage) only warns and the init goes on.
func TestReadSecrets(t *testing.T) {
	outage := idem.Transient(errors.New("reading secret s: 503 ServiceUnavailable"))
	denied := idem.Permanent(errors.New("reading secret d denied"))
	read := func(err error) func(context.Context) error { return func(context.Context) error { return err } }
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	tests := []struct {
		name  string
		reads []initRead
		fails string
		warns int
	}{
		{name: "all read", reads: []initRead{{env: "A", read: read(nil)}, {env: "B", read: read(nil)}}},
		{name: "an outage", reads: []initRead{{env: "A", secret: "s", read: read(outage)}, {env: "B", read: read(nil)}}, warns: 1},
		{name: "a hang is an outage", reads: []initRead{{env: "A", secret: "s", read: hang}}, warns: 1},
		{name: "a refusal", reads: []initRead{{env: "A", read: read(outage)}, {env: "B", read: read(denied)}}, fails: "config: B: reading secret d denied"},
		{name: "an unknown error", reads: []initRead{{env: "A", read: read(errors.New("what"))}}, fails: "config: A: what"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := readSecrets(ctx, slog.New(slog.NewJSONHandler(&logs, nil)), tt.reads)
			switch {
			case tt.fails != "":
				if err == nil || err.Error() != tt.fails {
					t.Fatalf("got %v; want %q", err, tt.fails)
				}
			case err != nil:
				t.Fatalf("got %v; want the init to go on", err)
			}
			if n := strings.Count(logs.String(), "starting anyway"); tt.fails == "" && n != tt.warns {
				t.Errorf("%d warnings (%s); want %d", n, logs.String(), tt.warns)
			}
		})
	}
}

// deniedAfterOutage is Secrets Manager down at the cold start, then
// refusing the function's role: the URL's secret never reads.
type deniedAfterOutage struct{ calls atomic.Int64 }

func (d *deniedAfterOutage) GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if d.calls.Add(1) == 1 {
		return nil, &smithy.GenericAPIError{Code: "ServiceUnavailable", Message: "down", Fault: smithy.FaultServer}
	}
	return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "no", Fault: smithy.FaultClient}
}

// A URL secret that could not be read at init and fails again later says so
// in the log, naming the variable and the secret: its deliveries go back
// until it reads, and the attempts' lines alone would not tell why.
func TestTheURLSecretsLaterFailuresAreLogged(t *testing.T) {
	var logs syncBuffer
	cfg := config.Config{DownstreamURLSecret: "oncely/downstream-url"}
	doc := downstreamURLSecret(&deniedAfterOutage{}, cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	ctx := context.Background()
	if err := doc.Load(ctx); idem.Classify(err) != idem.ClassTransient {
		t.Fatalf("init read: %v; want the outage, transient", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "downstream URL secret not read yet") {
		if time.Now().After(deadline) {
			t.Fatalf("logged %q; want a warning about the URL secret", logs.String())
		}
		_, _ = doc.Get(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	if s := logs.String(); !strings.Contains(s, cfg.DownstreamURLSecret) || !strings.Contains(s, config.EnvDownstreamURLSecret) {
		t.Errorf("logged %q; want the secret and its variable named", s)
	}
}

// syncBuffer is a bytes.Buffer safe for the reads' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package main

// The golden test pins what the ready function does, as wire builds it,
// with a corpus of events: the items it leaves in the table, its batch and
// API responses, its EMF documents, its log lines, what it POSTs to the
// downstream and the SQS and Secrets Manager calls it makes. Each step's
// record is a file under testdata/golden; `go test ./cmd/handler -run
// TestGolden -update` rewrites them. A change of behaviour shows as a
// diff of those files, and a change that nobody named is a bug.
//
// What makes it repeatable: the seams of main.go give every part one
// frozen clock (moved by the corpus between steps), a sleep that returns
// at once, a fixed jitter and counted fencing tokens; DynamoDB is minidyn,
// in-process; the downstream, Secrets Manager and SQS are local HTTP
// servers that answer from what they are sent, never from time or order.
// What is left to chance is normalised: a log line's timestamp, the
// servers' ports, the fencing tokens (records of one batch reserve in any
// order), the order of lines, calls and deliveries within a step (records
// of one batch run at once), and which copy of an event duplicated within
// a batch runs and which replays (sameKey). Copies of one key with
// different bodies in one batch would race for the key, so the corpus
// sends them in separate batches.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const goldenDir = "testdata/golden"

// epoch is the corpus's time zero. It lies far in the future on purpose:
// an invocation's deadline is epoch plus its timeout, and the contexts the
// parts derive from it end in real time (context.WithDeadline), so a
// deadline in the past would end every call at once. In 2100 they never
// end during the test.
var epoch = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

// The corpus's settings: the names the function is deployed with.
const (
	goldenTable     = "oncely-golden"
	ledgerTable     = "oncely-golden-ledger"
	queueARN        = "arn:aws:sqs:us-east-1:123456789012:oncely-events"
	fifoQueueARN    = "arn:aws:sqs:us-east-1:123456789012:oncely-events.fifo"
	inboundQueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/oncely-events"
	urlSecret       = "oncely/downstream-url"
	signingSecret   = "oncely/webhook-signing"
	sourcesSecret   = "oncely/inbound-sources"
	proofSecret     = "oncely/inbound-proof"
	proofKey        = "Vq3nM8sTgolden0envelope0proof0k1"
	signingKey      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	acmeKey         = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	stripeKey       = "whsec_stripe0golden0secret0for0tests"
	githubKey       = "golden-github-webhook-secret"
)

// goldenClock is the frozen clock every part reads; the corpus moves it
// between steps, never during one.
type goldenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *goldenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *goldenClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// invocationCtx is an invocation's context: its deadline is on the frozen
// clock, as Lambda's is on the real one.
type invocationCtx struct {
	context.Context
	deadline time.Time
}

func (c invocationCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// lockedBuffer is a bytes.Buffer safe for the invocations' goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was written since the last take.
func (l *lockedBuffer) take() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := bytes.Clone(l.b.Bytes())
	l.b.Reset()
	return b
}

// requestIDHandler is Lambda's log handler in its JSON format (the
// deployed function's), writing to a buffer: the same keys, and the
// request id from the invocation's context.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

// recorder collects what the local servers were sent.
type recorder struct {
	mu    sync.Mutex
	items []any
}

func (r *recorder) add(v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = append(r.items, v)
}

// take returns what was added since the last take, in a stable order.
func (r *recorder) take() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	items := r.items
	r.items = nil
	if items == nil {
		items = []any{}
	}
	slices.SortStableFunc(items, func(a, b any) int { return strings.Compare(mustJSON(a), mustJSON(b)) })
	return items
}

// downstream is the notify action's receiver. It answers from the event
// it is sent: "reply" is the status to answer (200 by default);
// "fail_first" makes the first n POSTs of one Idempotency-Key answer 503,
// the later ones 200; "hang_up" closes the connection once the request is
// read (a request that may have reached the receiver); "hold" waits until
// the test releases it.
type downstream struct {
	rec     recorder
	mu      sync.Mutex
	seen    map[string]int
	held    chan struct{} // a "hold" request arrived
	release chan struct{}
}

func (d *downstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	headers := map[string]string{}
	for name := range req.Header {
		headers[name] = req.Header.Get(name)
	}
	d.rec.add(map[string]any{"method": req.Method, "path": req.URL.Path, "headers": headers, "body": string(body)})
	var ev struct {
		Reply     int  `json:"reply"`
		FailFirst int  `json:"fail_first"`
		HangUp    bool `json:"hang_up"`
		Hold      bool `json:"hold"`
	}
	_ = json.Unmarshal(body, &ev)
	key := cmp.Or(req.Header.Get("Idempotency-Key"), req.Header.Get("Webhook-Id"))
	d.mu.Lock()
	d.seen[key]++
	n := d.seen[key]
	d.mu.Unlock()
	switch {
	case ev.HangUp:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case ev.Hold:
		d.held <- struct{}{}
		<-d.release
	case n <= ev.FailFirst:
		ev.Reply = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(cmp.Or(ev.Reply, http.StatusOK))
	fmt.Fprintf(w, `{"received":%q,"attempt":%d}`, key, n)
}

// fakeAWS answers the function's Secrets Manager and SQS calls (AWS JSON
// protocol) from fixed secrets, and records every call.
type fakeAWS struct {
	rec     recorder
	secrets map[string]string
	mu      sync.Mutex
	sent    []string // the bodies of SendMessage, in order
}

func (f *fakeAWS) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	target := req.Header.Get("X-Amz-Target")
	body, _ := io.ReadAll(req.Body)
	var in map[string]any
	_ = json.Unmarshal(body, &in)
	f.rec.add(map[string]any{"call": target, "input": in})
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch target {
	case "secretsmanager.GetSecretValue":
		id, _ := in["SecretId"].(string)
		stage, _ := in["VersionStage"].(string)
		v, ok := f.secrets[id]
		if !ok || stage != "AWSCURRENT" {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"ResourceNotFoundException","message":"Secrets Manager can't find the specified secret value for staging label"}`)
			return
		}
		reply(map[string]any{"ARN": "arn:aws:secretsmanager:us-east-1:123456789012:secret:" + id, "Name": id,
			"SecretString": v, "VersionId": "v1", "VersionStages": []string{"AWSCURRENT"}})
	case "AmazonSQS.ChangeMessageVisibilityBatch":
		var ok []map[string]string
		entries, _ := in["Entries"].([]any)
		for _, e := range entries {
			id, _ := e.(map[string]any)["Id"].(string)
			ok = append(ok, map[string]string{"Id": id})
		}
		reply(map[string]any{"Successful": ok, "Failed": []any{}})
	case "AmazonSQS.SendMessage":
		msg, _ := in["MessageBody"].(string)
		f.mu.Lock()
		f.sent = append(f.sent, msg)
		n := len(f.sent)
		f.mu.Unlock()
		sum := md5.Sum([]byte(msg))
		reply(map[string]any{"MessageId": fmt.Sprintf("00000000-0000-4000-8000-%012d", n), "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	default:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"__type":"UnknownOperationException","message":"golden fake: %s"}`, target)
	}
}

// takeSent returns the messages sent to the queue since the last call.
func (f *fakeAWS) takeSent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sent
	f.sent = nil
	return s
}

// golden runs the corpus against the wired function.
type golden struct {
	t          *testing.T
	router     *router.Router
	clock      *goldenClock
	logs       *lockedBuffer
	metrics    *lockedBuffer
	down       *downstream
	aws        *fakeAWS
	ddb        *dynamodb.Client
	replace    []string // pairs of what to normalise in the records, and what to write instead
	tokens     []string
	tokensMu   sync.Mutex
	step       int
	requestSeq int
	written    map[string]bool
}

func newGolden(t *testing.T) *golden {
	g := &golden{t: t, clock: &goldenClock{t: epoch}, logs: &lockedBuffer{}, metrics: &lockedBuffer{}, written: map[string]bool{}}
	g.down = &downstream{seen: map[string]int{}, held: make(chan struct{}), release: make(chan struct{})}
	down := httptest.NewServer(g.down)
	t.Cleanup(down.Close)
	g.aws = &fakeAWS{secrets: map[string]string{
		urlSecret:     down.URL + "/hooks",
		signingSecret: signingKey,
		proofSecret:   proofKey,
		sourcesSecret: fmt.Sprintf(`{"acme":{"scheme":"standard-webhooks","secrets":[%q]},"stripe":{"scheme":"stripe","secrets":[%q]},"github":{"scheme":"github","secrets":[%q]}}`, acmeKey, stripeKey, githubKey),
	}}
	fake := httptest.NewServer(g.aws)
	t.Cleanup(fake.Close)
	_, ep := ddblocal.Minidyn(t)
	g.ddb, _ = ddblocal.Client(ddblocal.Config(ep, nil))
	if _, err := ddbstore.CreateTable(context.Background(), g.ddb, goldenTable); err != nil && !errors.Is(err, ddbstore.ErrNoTTL) {
		t.Fatal(err)
	}
	ddblocal.NewTableKeyedBy(t, g.ddb, ledgerTable, "pk")
	g.replace = []string{down.URL, "http://downstream.invalid", fake.URL, "http://aws.invalid", ep, "http://dynamodb.invalid"}
	for _, u := range []string{down.URL, fake.URL, ep} {
		g.replace = append(g.replace, strings.TrimPrefix(u, "http://"), "127.0.0.1:<port>")
	}

	// The environment the function reads: every setting it knows cleared,
	// then the corpus's.
	for _, name := range goldenClearedEnv {
		t.Setenv(name, "")
	}
	for name, value := range map[string]string{
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_SESSION_TOKEN": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "",
		"AWS_ENDPOINT_URL_DYNAMODB": ep, "AWS_ENDPOINT_URL_SQS": fake.URL, "AWS_ENDPOINT_URL_SECRETS_MANAGER": fake.URL,
		envRuntimeAPI:                     "",
		config.EnvTable:                   goldenTable,
		config.EnvNamespace:               "golden",
		config.EnvDownstreamURLSecret:     urlSecret,
		config.EnvWebhookSecret:           signingSecret,
		config.EnvInboundWebhooks:         "on",
		config.EnvInboundSources:          sourcesSecret,
		config.EnvInboundQueueURL:         inboundQueueURL,
		config.EnvInboundProofSecret:      proofSecret,
		config.EnvJWTIssuer:               "https://auth.example.invalid/",
		config.EnvFunctionName:            "oncely-golden",
		config.EnvTransientStatuses:       "",
		config.EnvMaxBodyBytes:            "",
		"AWS_LAMBDA_MAX_CONCURRENCY":      "",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "",
	} {
		t.Setenv(name, value)
	}

	// Lambda's function name, which aws-lambda-go reads at start: the
	// metrics' FunctionName dimension.
	functionName := lambdacontext.FunctionName
	lambdacontext.FunctionName = "oncely-golden"
	t.Cleanup(func() { lambdacontext.FunctionName = functionName })
	seamNow = g.clock.Now
	// The engine wire asks oncely.New for, with the test's backoff sleep
	// (none), jitter and fencing tokens: the same options, mapped as
	// oncely.New maps them.
	seamEngine = func(store driver.Store, o oncely.Options) (*oncely.Engine, error) {
		e, err := idem.New(idem.Options{Store: store, Retry: idem.RetryPolicy(o.Retry), Budget: idem.Budget(o.Budget), Lease: o.Lease,
			Retention: o.Retention, SentPause: o.SentPause, Logger: o.Logger, Now: o.Now,
			Sleep:  func(ctx context.Context, d time.Duration) error { return ctx.Err() },
			Random: func() float64 { return 0.5 }, NewToken: g.newToken})
		if err != nil {
			return nil, err
		}
		return engineref.Wrap(e).(*oncely.Engine), nil
	}
	seamLog = requestIDHandler{slog.NewJSONHandler(g.logs, &slog.HandlerOptions{ReplaceAttr: lambdacontext.ReplaceAttr})}
	seamMetrics = g.metrics
	t.Cleanup(func() {
		seamNow, seamEngine, seamLog, seamMetrics = nil, nil, nil, nil
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	})

	g.rewire("init", nil)
	return g
}

// rewire builds the function again (a cold start), with env's settings
// on top of the corpus's, and records its init.
func (g *golden) rewire(name string, env map[string]string) {
	g.t.Helper()
	for k, v := range env {
		g.t.Setenv(k, v)
	}
	r, err := wire(context.Background())
	if err != nil {
		g.t.Fatalf("wire: %v", err)
	}
	g.router = r
	g.record(name, map[string]any{})
}

// goldenClearedEnv are the variables the function reads that the corpus
// leaves at their defaults: a value from the machine must not change them.
var goldenClearedEnv = []string{
	config.EnvTable, config.EnvNamespace, config.EnvTTL, config.EnvLease, config.EnvAttemptsPerDelivery,
	config.EnvAttemptsPerKey, config.EnvBackoffBase, config.EnvBackoffMax, config.EnvKeyJMESPath,
	config.EnvPayloadJMESPath, config.EnvMaxConcurrency, config.EnvQueueBackoff, config.EnvQueueBackoffBase,
	config.EnvQueueBackoffMax, config.EnvMaxBodyBytes, config.EnvDownstreamURL, config.EnvDownstreamURLSecret,
	config.EnvJWTIssuer, config.EnvNotifyTimeout, config.EnvTransientStatuses, config.EnvAction,
	config.EnvLedgerTable, config.EnvWebhookSigning, config.EnvWebhookSecret, config.EnvWebhookRefresh,
	config.EnvInboundWebhooks, config.EnvInboundSources, config.EnvInboundRefresh, config.EnvInboundQueueURL,
	config.EnvInboundTolerance, config.EnvInboundProofSecret, config.EnvInboundProofSince, "AWS_SAM_LOCAL",
}

// newToken is the engine's fencing tokens: distinct, in the format of
// the real ones (32 hex digits), and normalised in the records.
func (g *golden) newToken() string {
	g.tokensMu.Lock()
	defer g.tokensMu.Unlock()
	tok := fmt.Sprintf("901de%027x", len(g.tokens)+1)
	g.tokens = append(g.tokens, tok)
	return tok
}

// at moves the clock to epoch+d.
func (g *golden) at(d time.Duration) { g.clock.set(epoch.Add(d)) }

// ctx returns a new invocation's context: its request id and a deadline
// timeout from now on the frozen clock.
func (g *golden) ctx(timeout time.Duration) (context.Context, string) {
	g.requestSeq++
	id := fmt.Sprintf("req-%03d", g.requestSeq)
	ctx := invocationCtx{Context: context.Background(), deadline: g.clock.Now().Add(timeout)}
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: id, InvokedFunctionArn: "arn:aws:lambda:us-east-1:123456789012:function:oncely-golden"}), id
}

// Timeouts: the template's queue and API functions.
const (
	queueTimeout = 30 * time.Second
	apiTimeout   = 6 * time.Second
)

// invoke runs one event through the router and records the step.
func (g *golden) invoke(name string, event any) any {
	g.t.Helper()
	timeout := queueTimeout
	if _, ok := event.(events.APIGatewayV2HTTPRequest); ok {
		timeout = apiTimeout
	}
	ctx, id := g.ctx(timeout)
	resp, err := g.router.Invoke(ctx, json.RawMessage(mustJSON(event)))
	g.record(name, map[string]any{"event": abbreviate(event), "request_id": id, "response": response(resp, err)})
	return resp
}

// response is what the runtime would send back: the result, or the
// error that fails the invocation.
func response(resp any, err error) any {
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return resp
}

// record writes (or checks) one step's golden file: what the step was
// given and answered, and everything the function wrote and sent meanwhile.
func (g *golden) record(name string, step map[string]any) {
	g.t.Helper()
	step["logs"] = g.takeLogs()
	step["metrics"] = jsonLines(g.t, g.metrics.take())
	step["downstream"] = g.down.rec.take()
	step["aws_calls"] = g.aws.rec.take()
	file := fmt.Sprintf("%02d-%s.json", g.step, name)
	g.step++
	g.compare(file, step)
}

// takeLogs returns the log lines since the last call, normalised, by
// request id (the lines of one invocation's records come in any order).
func (g *golden) takeLogs() map[string][]any {
	byRequest := map[string][]any{}
	for _, line := range jsonLines(g.t, g.logs.take()) {
		m := line.(map[string]any)
		// The log handler stamps each line with the real time.
		if _, ok := m["timestamp"]; ok {
			m["timestamp"] = "<time>"
		}
		id, _ := m["requestId"].(string)
		byRequest[cmp.Or(id, "process")] = append(byRequest[cmp.Or(id, "process")], m)
	}
	for _, lines := range byRequest {
		sameKey(lines)
		slices.SortStableFunc(lines, func(a, b any) int { return strings.Compare(mustJSON(a), mustJSON(b)) })
	}
	return byRequest
}

// sameKey rewrites the "record" lines of copies of one event in one
// batch: they run once, and the copy that runs is whichever reaches the
// key first (the others replay its outcome), so each such line names
// every copy's messageId, joined by "|", instead of its own.
func sameKey(lines []any) {
	ids := map[string][]string{}
	for _, l := range lines {
		m := l.(map[string]any)
		key, _ := m["key"].(string)
		if id, ok := m["messageId"].(string); ok && m["message"] == "record" && key != "" {
			ids[key] = append(ids[key], id)
		}
	}
	for _, l := range lines {
		m := l.(map[string]any)
		key, _ := m["key"].(string)
		if copies := ids[key]; len(copies) > 1 && m["message"] == "record" {
			m["messageId"] = strings.Join(slices.Sorted(slices.Values(copies)), "|")
		}
	}
}

// compare normalises v, then writes it to file (-update) or checks it
// against the file.
func (g *golden) compare(file string, v any) {
	g.t.Helper()
	got := g.normalise(indentJSON(g.t, v))
	path := filepath.Join(goldenDir, file)
	g.written[file] = true
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			g.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		g.t.Errorf("%s: %v (run with -update to write it)", path, err)
		return
	}
	if diff := gocmp.Diff(string(want), got); diff != "" {
		g.t.Errorf("%s differs from the golden file (-want +got):\n%s", path, diff)
	}
}

// normalise replaces what differs between runs: the local servers'
// addresses and the fencing tokens.
func (g *golden) normalise(s string) string {
	s = strings.NewReplacer(g.replace...).Replace(s)
	g.tokensMu.Lock()
	defer g.tokensMu.Unlock()
	for _, tok := range g.tokens {
		s = strings.ReplaceAll(s, tok, "<token>")
	}
	return s
}

// items records every item of table in file, sorted by pk.
func (g *golden) items(file, table string) {
	g.t.Helper()
	var all []map[string]any
	var start map[string]types.AttributeValue
	for {
		out, err := g.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: ptr(table), ExclusiveStartKey: start, ConsistentRead: ptr(true)})
		if err != nil {
			g.t.Fatal(err)
		}
		for _, it := range out.Items {
			all = append(all, attrMap(it))
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			break
		}
	}
	slices.SortFunc(all, func(a, b map[string]any) int { return strings.Compare(mustJSON(a["pk"]), mustJSON(b["pk"])) })
	g.compare(file, all)
}

// checkNoStale fails on a golden file the corpus no longer writes.
func (g *golden) checkNoStale() {
	g.t.Helper()
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, e := range entries {
		if !g.written[e.Name()] {
			if *update {
				_ = os.Remove(filepath.Join(goldenDir, e.Name()))
				continue
			}
			g.t.Errorf("%s: a golden file the corpus does not write (run with -update to remove it)", filepath.Join(goldenDir, e.Name()))
		}
	}
}

// attrMap is an item in DynamoDB's JSON form.
func attrMap(item map[string]types.AttributeValue) map[string]any {
	m := make(map[string]any, len(item))
	for k, v := range item {
		m[k] = attrValue(v)
	}
	return m
}

func attrValue(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": v.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": base64.StdEncoding.EncodeToString(v.Value)}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": v.Value}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": attrMap(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = attrValue(e)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": slices.Sorted(slices.Values(v.Value))}
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": slices.Sorted(slices.Values(v.Value))}
	}
	return fmt.Sprintf("%T", v)
}

func ptr[T any](v T) *T { return &v }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// indentJSON is v as indented JSON, through a generic value so that every
// object's members are sorted.
func indentJSON(t *testing.T, v any) string {
	t.Helper()
	var generic any
	if err := json.Unmarshal([]byte(mustJSON(v)), &generic); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(generic); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// jsonLines decodes one JSON value per line.
func jsonLines(t *testing.T, b []byte) []any {
	t.Helper()
	out := []any{}
	for line := range bytes.Lines(b) {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		out = append(out, v)
	}
	return out
}

// abbreviate returns the event for the record, a long body replaced by its
// length (the too-large cases are a MiB).
func abbreviate(event any) any {
	const limit = 2048
	switch ev := event.(type) {
	case events.SQSEvent:
		recs := slices.Clone(ev.Records)
		for i := range recs {
			if len(recs[i].Body) > limit {
				recs[i].Body = fmt.Sprintf("<%d bytes>", len(recs[i].Body))
			}
		}
		return events.SQSEvent{Records: recs}
	case events.APIGatewayV2HTTPRequest:
		if len(ev.Body) > limit {
			ev.Body = fmt.Sprintf("<%d bytes>", len(ev.Body))
		}
		return ev
	}
	return event
}

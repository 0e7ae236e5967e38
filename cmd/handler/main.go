// Command handler is the Lambda function: one bootstrap binary serving SQS
// batches and API Gateway HTTP API requests. The template deploys it twice,
// as the queue function and the API function, each with its own settings.
// It only wires the pieces: configuration, the DynamoDB store, the engine,
// the action, lambda.Start.
//
// # Many invocations in one process
//
// Under Lambda Managed Instances, Lambda sets AWS_LAMBDA_MAX_CONCURRENCY and
// aws-lambda-go runs that many invoke loops in goroutines of this one
// process, each serving one invocation at a time. Everything wire builds is
// then shared by every invocation in flight, and is safe for it: the
// configuration and the adapters' options (read-only after init); the
// logger (slog's JSON handler writes each line with one Write, under its
// lock, to stdout); the AWS SDK clients and their connection pools; the
// DynamoDB store (no state of its own); the engine (its one atomic
// counter, of the actions it abandoned that are still running);
// the signing keys and the other secrets (secretsource: one read at a
// time, shared by every invocation that wants it and run with its own
// timeout, the newest read's keys win, a failed or panicking read leaves
// the last good value, and each problem it counts is taken by one
// invocation's metrics); the notifier made once the URL's secret is read;
// the notifier and its HTTP client; the router (its metrics writer gets one
// Write per EMF document, which an *os.File keeps whole; FirstInvoke runs
// once, the first invocations waiting for it).
//
// Nothing about one invocation is kept where another can see it: its
// deadline, request id and trace id travel in its context (aws-lambda-go
// sets _X_AMZN_TRACE_ID only when one loop runs), and its in-batch
// coalescing, metric counts and outcomes live in the call. Each record's
// and request's log line carries its invocation's request id (added from
// the context by the Lambda log handler).
//
// What this process cannot survive, it ends for every invocation in it: a
// panic is recovered where oncely's code runs (per record in sqsbatch, per
// invocation in the router; the action's by the engine), but not on a
// goroutine a library started, where Go cannot recover it; and an answer
// after an invocation's deadline is refused by the Runtime API, which
// aws-lambda-go treats as fatal (checked under the emulator). The time
// budget (idem.Budget) keeps every answer before the deadline: Lambda does
// not stop an invocation at its timeout there; an action that ignores its
// context is abandoned by the engine at its work deadline, so that it
// cannot hold an answer past it. Past maxAbandoned of those still running,
// the process exits between invocations (exitGate says how) instead of
// piling up goroutines. internal/e2e's
// TestE2EManagedInstances checks all of this under the emulator's
// managed-instances mode, with the race detector.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/lambdasdk"
	"github.com/oncely/oncely/internal/ledger"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/sqssend"
	"github.com/oncely/oncely/sqsbatch"
)

// initSecretBudget bounds the secrets' first reads at init, all of them
// at once (the URL, the signing keys' three stages, the inbound sources),
// and initProbeTimeout the table's probe, which runs beside them: 5 s
// leaves half of Lambda's 10 s init limit to the runtime and the rest of
// init, so that a hanging Secrets Manager gives a warning, not an init
// timeout (which Lambda would retry within the function's own timeout, 6 s
// on the API function, and count as a failed receive).
const (
	initSecretBudget = 5 * time.Second
	initProbeTimeout = 2 * time.Second
)

// maxAbandoned is the bound of abandoned actions still running in one
// process past which it exits between invocations: twice the invocations
// it serves at once, at least 4. An action abandoned now and then (a
// library call that ignored its context once) stays under it and finishes
// on its own; past it, actions outlive their invocations as a rule, and a
// fresh process is cheaper than their goroutines, connections and memory.
func maxAbandoned(concurrency int) int { return max(4, 2*concurrency) }

// wrapAction and boundAbandoned, when a build-tagged file sets them
// (faults.go, for the end-to-end tests only), wrap the action and replace
// maxAbandoned. The deployed bootstrap never sets them.
var (
	wrapAction     func(action.Func) action.Func
	boundAbandoned func() int
)

// wrapStore, when a build-tagged file sets it (faults.go, for the
// end-to-end tests only), wraps the engine's store. The deployed bootstrap
// never sets it.
var wrapStore func(*dynamostore.Store) driver.Store

// Seams for the golden test (golden_test.go), which pins what the function
// does with a corpus of events. When a test sets them, they replace what
// wire gives every part it builds: the clock (the engine's, the adapters',
// the router's and the notifier's), the engine (seamEngine builds it with
// the test's sleep of the backoff, jitter and fencing tokens, from the
// options wire gives oncely.New), and where the log lines and the EMF
// documents go (the log handler, with the request id from the context,
// and the metrics writer). The deployed bootstrap never sets them: nil is
// each part's own default (time.Now, oncely.New, Lambda's log handler on
// stdout).
var (
	seamNow     func() time.Time
	seamEngine  func(store driver.Store, o oncely.Options) (*oncely.Engine, error)
	seamLog     slog.Handler
	seamMetrics io.Writer
)

func main() {
	tuneRuntime(config.RuntimeSettings(os.Getenv))
	r, err := wire(context.Background())
	if err != nil {
		// One line that names what is wrong; the init fails.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// One line per process: what it serves at once and what it runs with
	// (under Managed Instances a process lives long and serves many
	// invocations at once; this says how it was sized).
	slog.Info("runtime settings", "max_concurrency", lambdacontext.MaxConcurrency(),
		"gomaxprocs", runtime.GOMAXPROCS(0), "gomemlimit_bytes", debug.SetMemoryLimit(-1))
	lambda.Start(r.Invoke)
}

// probeTable reads the table once (half a read unit per cold start): a
// missing table, a denied permission or another key schema fails the init
// with one line naming the table and DynamoDB's error code, like every other
// bad setting, instead of failing every message later. An outage
// (throttling, 5xx, a timeout) only warns: it must not stop cold starts.
func probeTable(ctx context.Context, store *dynamostore.Store, logger *slog.Logger, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := store.Check(pctx)
	switch {
	case err == nil:
		return nil
	case oncely.Classify(err) == oncely.ClassPermanent:
		return fmt.Errorf("config: %s: %w", config.EnvTable, err)
	}
	logger.WarnContext(ctx, "the idempotency table could not be checked at init; starting anyway", "error", err.Error(), driver.StoreAttr(err))
	return nil
}

// tuneRuntime applies the runtime settings config chose (each zero value
// leaves the runtime's own choice).
func tuneRuntime(r config.Runtime) {
	if r.MaxProcs > 0 {
		runtime.GOMAXPROCS(r.MaxProcs)
	}
	if r.GCPercent > 0 {
		debug.SetGCPercent(r.GCPercent)
	}
	if r.MemoryLimit > 0 {
		debug.SetMemoryLimit(r.MemoryLimit)
	}
}

// downstreamURLSecret is the secret that holds the downstream URL, read
// at init and never again (a new URL needs a new environment, as before);
// until a read succeeds, every delivery goes back to be retried. Neither
// the value nor an error about it names the URL: only the secret.
func downstreamURLSecret(sm secretsource.API, cfg config.Config, logger *slog.Logger) *secretsource.Document[string] {
	doc := secretsource.NewDocument(sm, cfg.DownstreamURLSecret, secretsource.NoRefresh, func(u string) (string, error) {
		if err := config.CheckDownstreamURL(u); err != nil {
			return "", err
		}
		return strings.TrimSpace(u), nil
	})
	// A read after init that fails (a permission removed, a value that is
	// not a URL) says so in the log, not only in each attempt's line: the
	// deliveries go back until a read succeeds. The error names the
	// secret, never the value.
	doc.OnRefreshError(func(err error) {
		logger.Warn("downstream URL secret not read yet; deliveries go back to be retried until it is", "variable", config.EnvDownstreamURLSecret, "secret", cfg.DownstreamURLSecret, "error", err.Error())
	})
	return doc
}

// initRead is one secret's first read at init.
type initRead struct {
	env    string // the variable that names the secret
	secret string
	read   func(ctx context.Context) error
	// loaded, if set, runs once the read succeeded (at init or later).
	loaded func(ctx context.Context)
}

// readSecrets makes every first read at once, within initSecretBudget.
// A permanent error (a missing secret or permission, a value that is not
// what it must be) fails the init with one line naming the variable and
// the secret, the first in reads' order; a transient one (throttling, a
// 5xx, a timeout: the AWS error classifier's verdict, as the table probe
// decides) only warns: the function starts, and each delivery that needs
// the secret reads it (one read at a time per process) or goes back to be
// retried until one succeeds.
func readSecrets(ctx context.Context, logger *slog.Logger, reads []initRead) error {
	rctx, cancel := context.WithTimeout(ctx, initSecretBudget)
	defer cancel()
	errs := make([]error, len(reads))
	var wg sync.WaitGroup
	for i, r := range reads {
		wg.Go(func() { errs[i] = r.read(rctx) })
	}
	wg.Wait()
	for i, r := range reads {
		if err := errs[i]; err != nil && oncely.Classify(err) != oncely.ClassTransient {
			return fmt.Errorf("config: %s: %w", r.env, err)
		}
	}
	for i, r := range reads {
		if err := errs[i]; err != nil {
			logger.WarnContext(ctx, "a secret could not be read at init; starting anyway: what needs it goes back to be retried until a read succeeds",
				"variable", r.env, "secret", r.secret, "error", err.Error())
		} else if r.loaded != nil {
			r.loaded(ctx)
		}
	}
	return nil
}

// wire builds the router from the configuration, reading at init every
// secret and the table, so that a bad setting fails the init with one line.
func wire(ctx context.Context) (*router.Router, error) {
	var logs slog.Handler = lambdacontext.NewLogHandler()
	if seamLog != nil {
		logs = seamLog
	}
	logger := slog.New(logs)
	slog.SetDefault(logger)
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, err
	}
	// The SDK reads the region, credentials and AWS_ENDPOINT_URL_<SERVICE>
	// itself; its standard retryer retries throttling, within the time the
	// engine's budget gives each call.
	// Its own warnings go to the function's JSON log, not as plain text.
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithLogger(lambdasdk.Logger(logger)))
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	// One retry quota for the process: every client built from awsCfg
	// (DynamoDB, SQS, Secrets Manager) stops retrying together while calls
	// keep failing (package lambdasdk says how much and why).
	quota := lambdasdk.NewQuota(logger)
	awsCfg = quota.Share(awsCfg)
	// The store's client drops per-call work a function does not need
	// (package lambdasdk says what and why).
	// The namespace is config's (IDEMPOTENCY_NAMESPACE, else the function's
	// name, as it always was): a deployed function's keys stay as they are.
	store, err := dynamostore.New(lambdasdk.DynamoDB(awsCfg, quota), cfg.Table, dynamostore.Options{Namespace: cfg.Namespace})
	if err != nil {
		return nil, err
	}
	// Beside the secrets' reads: the init's worst case stays theirs.
	probed := make(chan error, 1)
	go func() { probed <- probeTable(ctx, store, logger, initProbeTimeout) }()
	engine, err := newEngine(store, cfg, logger)
	if err != nil {
		return nil, err
	}
	sqsClient := sqs.NewFromConfig(awsCfg)
	sm := secretsmanager.NewFromConfig(awsCfg)
	act, err := newAction(cfg, sm, logger)
	if err != nil {
		return nil, err
	}
	proof, proofRead := envelopeProof(cfg.Proof, sm, logger)
	webhooks, sources, inboundRead := receivingRoute(cfg.Inbound, sm, sqsClient, logger)
	if webhooks != nil {
		webhooks.Proof = proof.Keys
	}
	if err := readSecrets(ctx, logger, slices.Concat(act.reads, inboundRead, proofRead)); err != nil {
		return nil, err
	}
	if err := <-probed; err != nil {
		return nil, err
	}
	if err := gateRuntimeAPI(engine, logger); err != nil {
		return nil, err
	}
	var metrics io.Writer = os.Stdout
	if seamMetrics != nil {
		metrics = seamMetrics
	}
	r := &router.Router{Function: lambdacontext.FunctionName, Metrics: metrics, Logger: logger, Now: seamNow, FirstInvoke: act.firstInvoke(budget, logger)}
	if wrapAction != nil {
		act.do = wrapAction(act.do)
	}
	if r.SQS, r.HTTP, r.Receiving, err = adapters(cfg, engine, act.do, webhooks, proof, sqsClient, logger); err != nil {
		return nil, err
	}
	// Only a set secret reports its health: a nil pointer in the interface
	// would not be nil.
	if act.keys != nil {
		r.Secret = act.keys
	}
	if sources != nil {
		r.InboundSecret = sources
	}
	if keys, ok := proof.Keys.(*secretsource.Source); ok && keys != nil {
		r.ProofSecret = keys
	}
	return r, nil
}

// gateRuntimeAPI puts the exit gate (exitgate.go) between aws-lambda-go
// and the Runtime API, with the engine's count of abandoned actions and
// the bound. Outside Lambda (no Runtime API) there is nothing to gate.
func gateRuntimeAPI(engine *oncely.Engine, logger *slog.Logger) error {
	api := os.Getenv(envRuntimeAPI)
	if api == "" {
		return nil
	}
	concurrency := lambdacontext.MaxConcurrency()
	bound := maxAbandoned(concurrency)
	if boundAbandoned != nil {
		bound = boundAbandoned()
	}
	addr, err := startExitGate(api, concurrency, &exitGate{abandoned: engine.Abandoned, bound: bound, logger: logger, exit: func() { os.Exit(0) }})
	if err != nil {
		return err
	}
	return os.Setenv(envRuntimeAPI, addr)
}

// budget is the product's time budget: the library's defaults.
var budget = oncely.Budget{}

// newEngine builds the engine on the store (wrapped when a build-tagged
// file asks).
func newEngine(store *dynamostore.Store, cfg config.Config, logger *slog.Logger) (*oncely.Engine, error) {
	var engineStore driver.Store = store
	if wrapStore != nil {
		engineStore = wrapStore(store)
	}
	o := oncely.Options{Retry: oncely.RetryPolicy(cfg.Retry), Budget: budget, Lease: cfg.Lease, Retention: cfg.TTL,
		SentPause: cfg.SentPause(), Logger: logger, Now: seamNow}
	if seamEngine != nil {
		return seamEngine(engineStore, o)
	}
	return oncely.New(engineStore, o)
}

// wiredAction is the action the function runs, with what the router needs
// of a notify action: its notifier and its signing keys, and the secrets
// to read at init.
type wiredAction struct {
	do       action.Func
	notifier *notify.Notifier     // nil for the ledger; its URL may come later (url)
	url      *lazyURL             // nil unless the URL is a secret's
	keys     *secretsource.Source // nil unless deliveries are signed
	reads    []initRead
}

// newAction builds the configured action. For notify, the downstream URL's
// secret and the signing secret are read at init (readSecrets): a missing
// secret or permission fails the init with one line, instead of every
// delivery later; an outage does not.
func newAction(cfg config.Config, sm secretsource.API, logger *slog.Logger) (wiredAction, error) {
	if cfg.Action == config.ActionLedger {
		return wiredAction{do: (&ledger.Ledger{Table: cfg.LedgerTable, Now: seamNow}).Do}, nil
	}
	a := wiredAction{notifier: notify.New(cfg.DownstreamURL, cfg.NotifyTimeout, notify.Classifier{Transient: cfg.TransientStatuses})}
	a.notifier.Now = seamNow
	a.do = a.notifier.Do
	if cfg.DownstreamURLSecret == "" {
		warnPlainHTTP(context.Background(), cfg.DownstreamURL, logger)
	} else {
		a.url = &lazyURL{doc: downstreamURLSecret(sm, cfg, logger), secret: cfg.DownstreamURLSecret, template: a.notifier, logger: logger}
		a.do = a.url.Do
		a.reads = append(a.reads, initRead{env: config.EnvDownstreamURLSecret, secret: cfg.DownstreamURLSecret, read: a.url.doc.Load, loaded: a.url.loaded})
	}
	if cfg.Signing.Off {
		return a, nil
	}
	a.keys = secretsource.New(sm, cfg.Signing.Secret, cfg.Signing.Refresh, logger)
	a.notifier.Signer = a.keys
	a.reads = append(a.reads, initRead{env: config.EnvWebhookSecret, secret: cfg.Signing.Secret, read: func(ctx context.Context) error {
		_, err := a.keys.Reload(ctx)
		return err
	}})
	return a, nil
}

// warnPlainHTTP says once, when the URL is known, that it is plain http
// outside a local run.
func warnPlainHTTP(ctx context.Context, url string, logger *slog.Logger) {
	if w := config.PlainHTTPWarning(url, os.Getenv); w != "" {
		logger.WarnContext(ctx, "misconfiguration: "+w)
	}
}

// lazyURL is the notify action when the downstream URL is a secret's: the
// notifier (a copy of template with the URL) is made by the first
// delivery after the secret was read, at init or later. Until then each
// delivery reads it (one read at a time per process, shared) or fails
// transient: it goes back to the queue with its backoff (API: 503 with
// Retry-After), and nothing is acknowledged.
type lazyURL struct {
	doc      *secretsource.Document[string]
	secret   string
	template *notify.Notifier
	logger   *slog.Logger
	// n is the notifier once made; two first deliveries may both make
	// one, and the one stored first is kept (same URL, same settings).
	n atomic.Pointer[notify.Notifier]
}

// Do implements action.Func.
func (l *lazyURL) Do(ctx context.Context, ev action.Event) (action.Result, error) {
	n := l.n.Load()
	if n == nil {
		u, err := l.doc.Get(ctx)
		if err != nil {
			return action.Result{}, oncely.Transient(fmt.Errorf("notify: the downstream URL's secret is not read yet: %w", err))
		}
		n = l.notifier(ctx, u)
	}
	return n.Do(ctx, ev)
}

// loaded makes the notifier when the URL was read at init (its plain-http
// warning is then an init line, as for DOWNSTREAM_URL).
func (l *lazyURL) loaded(ctx context.Context) {
	if u, err := l.doc.Get(ctx); err == nil {
		l.notifier(ctx, u)
	}
}

// notifier returns the notifier for u, making it if none was.
func (l *lazyURL) notifier(ctx context.Context, u string) *notify.Notifier {
	// A copy of every setting, the HTTP client (and its pool) shared.
	made := *l.template
	made.URL = u
	if l.n.CompareAndSwap(nil, &made) {
		warnPlainHTTP(ctx, u, l.logger)
	}
	return l.n.Load()
}

// firstInvoke is the router's FirstInvoke: Lambda does not show the
// function's timeout at init; the first invocation does. It says once if a
// request cannot fit in it.
func (a wiredAction) firstInvoke(budget oncely.Budget, logger *slog.Logger) func(context.Context, time.Duration) {
	return func(ctx context.Context, timeout time.Duration) {
		if a.notifier == nil {
			return
		}
		if err := a.notifier.Fits(budget.WorkTime(timeout)); err != nil {
			logger.WarnContext(ctx, "misconfiguration: "+err.Error(), "function_timeout", timeout.String(), "budget_reserve", budget.Reserve().String())
		}
	}
}

// adapters builds the SQS and HTTP adapters around the engine and the
// action. The queue path is the public sqsbatch's, on the same engine.
func adapters(cfg config.Config, engine *oncely.Engine, act action.Func, webhooks *receiving.Options, proof queue.Proof, sqsClient *sqs.Client, logger *slog.Logger) (*queue.Handler, *eventsapi.Handler, *receiving.Handler, error) {
	var backoff *sqsbatch.Backoff
	if !cfg.QueueBackoff.Off {
		backoff = &sqsbatch.Backoff{SQS: sqsClient, Base: cfg.QueueBackoff.Base, Max: cfg.QueueBackoff.Max}
	}
	sqsHandler, err := queue.New(engine, cfg.Keys, act, sqsbatch.Options{
		MaxConcurrency: cfg.MaxConcurrency, MaxBodyBytes: cfg.MaxBodyBytes, Backoff: backoff,
	}, proof)
	if err != nil {
		return nil, nil, nil, err
	}
	api, err := eventsapi.New(eventsapi.Options{Engine: engine, Action: act, MaxBodyBytes: cfg.MaxBodyBytes, JWTIssuer: cfg.JWTIssuer, Logger: logger, Now: seamNow})
	if err != nil {
		return nil, nil, nil, err
	}
	if webhooks == nil {
		return sqsHandler, api, nil, nil
	}
	webhooks.Engine, webhooks.MaxBodyBytes, webhooks.Logger, webhooks.Now = engine, cfg.MaxBodyBytes, logger, seamNow
	hooks, err := receiving.New(*webhooks)
	if err != nil {
		return nil, nil, nil, err
	}
	return sqsHandler, api, hooks, nil
}

// envelopeProof wires the inbound envelope proof (docs/inbound-webhooks.md):
// the proof secret's live keys, which the receiving route proves each
// envelope with and the queue path checks them with, read at init like
// every secret (a missing secret or permission fails the init), and the
// cutover. Without INBOUND_PROOF_SECRET, Keys is nil.
func envelopeProof(p config.Proof, secrets secretsource.API, logger *slog.Logger) (queue.Proof, []initRead) {
	proof := queue.Proof{Since: p.Since}
	if p.Secret == "" {
		return proof, nil
	}
	keys := secretsource.New(secrets, p.Secret, 0, logger).Named("inbound envelope proof secret")
	proof.Keys = keys
	return proof, []initRead{{env: config.EnvInboundProofSecret, secret: p.Secret, read: func(ctx context.Context) error {
		_, err := keys.Reload(ctx)
		return err
	}}}
}

// receivingRoute wires the receiving route POST /webhooks/{source}, or returns
// nil when it is off, with the sources' first read for init: a missing
// secret, a missing permission or a value that does not parse fails the
// init with one line; an outage does not, and the route answers 503 with
// Retry-After until a read succeeds.
func receivingRoute(in config.Inbound, secrets secretsource.API, queue *sqs.Client, logger *slog.Logger) (*receiving.Options, *secretsource.Document[*inbound.Sources], []initRead) {
	if !in.On {
		return nil, nil, nil
	}
	sources := secretsource.NewDocument(secrets, in.Secret, in.Refresh, inbound.ParseSources)
	sources.OnRefreshError(func(err error) {
		logger.Warn("inbound webhook sources not read; the last good ones (if any) stay in use", "secret", in.Secret, "error", err.Error())
	})
	read := initRead{env: config.EnvInboundSources, secret: in.Secret, read: sources.Load, loaded: func(ctx context.Context) {
		if s, _ := sources.Get(ctx); len(s.Names()) == 0 {
			logger.Warn("inbound webhooks are on, but the sources secret lists no source: every delivery is answered 404 until it does", "secret", in.Secret)
		} else {
			logger.Info("inbound webhook sources", "sources", s.Names())
		}
	}}
	return &receiving.Options{Sources: sources, Queue: sqssend.New(queue, in.QueueURL), MaxMessageBytes: sqssend.MaxMessageBytes, Tolerance: in.Tolerance}, sources, []initRead{read}
}

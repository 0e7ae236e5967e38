// Command handler is the Lambda function: one bootstrap binary serving SQS
// batches and API Gateway HTTP API requests. It only wires the pieces:
// configuration, the DynamoDB store, the engine, the action, lambda.Start.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/httpapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/ledger"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/sqsbatch"
	"github.com/oncely/oncely/internal/sqsvisibility"
)

// initSecretTimeout bounds the signing secret's first read at init.
const initSecretTimeout = 5 * time.Second

// wrapStore, when a build-tagged file sets it (faults.go, for the
// end-to-end tests only), wraps the engine's store. The deployed bootstrap
// never sets it.
var wrapStore func(*ddbstore.Store) idem.Store

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

func wire(ctx context.Context) (*router.Router, error) {
	logger := slog.New(lambdacontext.NewLogHandler())
	slog.SetDefault(logger)
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, err
	}
	// The SDK reads the region, credentials and AWS_ENDPOINT_URL_<SERVICE>
	// itself; its standard retryer retries throttling, within the time the
	// engine's budget gives each call.
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	store, err := ddbstore.New(dynamodb.NewFromConfig(awsCfg), cfg.Table, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	var engineStore idem.Store = store
	if wrapStore != nil {
		engineStore = wrapStore(store)
	}
	budget := idem.Budget{}
	engine, err := idem.New(idem.Options{Store: engineStore, Retry: cfg.Retry, Budget: budget, Lease: cfg.Lease, Retention: cfg.TTL, Logger: logger})
	if err != nil {
		return nil, err
	}
	var act action.Func
	var notifier *notify.Notifier
	switch cfg.Action {
	case config.ActionLedger:
		act = (&ledger.Ledger{Table: cfg.LedgerTable}).Do
	default:
		notifier = notify.New(cfg.DownstreamURL, cfg.NotifyTimeout, notify.Classifier{Transient: cfg.TransientStatuses})
		if !cfg.Signing.Off {
			// Read the signing secret now: a missing secret or permission fails
			// the init with one line, instead of every delivery later.
			keys := secretsource.New(secretsmanager.NewFromConfig(awsCfg), cfg.Signing.Secret, cfg.Signing.Refresh)
			// Bounded well inside Lambda's 10 s init limit, so that a hanging
			// Secrets Manager gives this line, not an init timeout.
			lctx, cancel := context.WithTimeout(ctx, initSecretTimeout)
			err := keys.Load(lctx)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("config: %s: %w", config.EnvWebhookSecret, err)
			}
			notifier.Signer = keys
		}
		act = notifier.Do
	}
	var visibility sqsvisibility.Changer
	if !cfg.QueueBackoff.Off {
		visibility = sqsvisibility.New(sqs.NewFromConfig(awsCfg))
	}
	sqsHandler, err := sqsbatch.New(sqsbatch.Options{
		Engine: engine, Poison: store, Action: act, Keys: cfg.Keys,
		MaxConcurrency: cfg.MaxConcurrency, MaxBodyBytes: cfg.MaxBodyBytes, PoisonRetention: cfg.TTL,
		Visibility: visibility, VisibilityPolicy: sqsvisibility.Policy{Base: cfg.QueueBackoff.Base, Max: cfg.QueueBackoff.Max},
		Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Options{Engine: engine, Action: act, MaxBodyBytes: cfg.MaxBodyBytes, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &router.Router{
		SQS: sqsHandler, HTTP: api, Function: lambdacontext.FunctionName, Metrics: os.Stdout, Logger: logger,
		FirstInvoke: func(ctx context.Context, timeout time.Duration) {
			// Lambda does not show the function's timeout at init; the first
			// invocation does. Say once if a request cannot fit in it.
			if notifier == nil {
				return
			}
			if err := notifier.Fits(budget.WorkTime(timeout)); err != nil {
				logger.WarnContext(ctx, "misconfiguration: "+err.Error(), "function_timeout", timeout.String(), "budget_reserve", budget.Reserve().String())
			}
		},
	}, nil
}

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

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/httpapi"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/sqsbatch"
)

func main() {
	tuneRuntime(config.RuntimeSettings(os.Getenv))
	r, err := wire(context.Background())
	if err != nil {
		// One line that names what is wrong; the init fails.
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
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
	// The SDK reads the region, credentials and AWS_ENDPOINT_URL_DYNAMODB
	// itself; its standard retryer retries throttling.
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("aws config: %w", err)
	}
	store, err := ddbstore.New(dynamodb.NewFromConfig(awsCfg), cfg.Table, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	engine, err := idem.New(idem.Options{Store: store, Retry: cfg.Retry, Lease: cfg.Lease, Retention: cfg.TTL, Logger: logger})
	if err != nil {
		return nil, err
	}
	act := notify.New(cfg.DownstreamURL, cfg.NotifyTimeout, idem.HTTPClassifier{Transient: cfg.TransientStatuses}).Do
	sqs, err := sqsbatch.New(sqsbatch.Options{
		Engine: engine, Poison: store, Action: act,
		KeyExpression: cfg.KeyExpression, PayloadExpression: cfg.PayloadExpression,
		MaxConcurrency: cfg.MaxConcurrency, PoisonRetention: cfg.TTL, Logger: logger,
		// Nothing starts that cannot finish: one request plus the margin.
		MinRemaining: cfg.NotifyTimeout + idem.DefaultSafetyMargin,
	})
	if err != nil {
		return nil, err
	}
	api, err := httpapi.New(httpapi.Options{Engine: engine, Action: act, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &router.Router{SQS: sqs, HTTP: api, Function: lambdacontext.FunctionName, Metrics: os.Stdout, Logger: logger}, nil
}

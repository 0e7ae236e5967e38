package lambdasdk

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The retry quota's size and costs: the SDK's own defaults (the standard
// retry behaviour every AWS SDK implements), written out here so that a
// change of them in the SDK is a decision of ours, not a surprise
// (TestQuotaIsTheSDKsDefault fails when they differ).
//
// Why these, for a Lambda process:
//
//   - A retry that succeeds gives its tokens back, so a short blip costs
//     nothing in the end; the bucket only drains by retries that fail
//     again. Full, it pays one throttled retry for each of 100 calls in
//     flight at once: every call of a Managed Instances environment at
//     AWS_LAMBDA_MAX_CONCURRENCY 8-10 with MAX_CONCURRENCY 10 records each
//     (one call per record at a time), so a blip across a whole, fully
//     loaded process is still ridden out in place. A smaller bucket would
//     send such records back to the queue, each receive counting towards
//     maxReceiveCount.
//   - In a sustained throttle, the process stops retrying after 100 failed
//     throttled retries (about 35 failed retries of other transient errors:
//     5xx, timeouts, resets), which is the first round of retries of a
//     fully loaded Managed Instances environment, or about three batches
//     of a one-invocation-at-a-time environment. After that each call makes
//     one attempt, and a record goes back to the queue at once with its own
//     backoff (SQS_BACKOFF_*): the queue, not a sleeping function, spreads
//     the retries over time, and a refused retry does not sleep.
//   - A throttled retry costs less than others (5 against 14) because
//     throttling says the request did nothing and the service is
//     answering; repeated 5xx and timeouts say it is failing.
//   - Every operation that succeeds at its first attempt puts one token
//     back, so the brake lets go within 5 successes per throttled retry
//     once the service recovers.
const (
	// QuotaTokens is the bucket's capacity, and what it holds at the start.
	QuotaTokens uint = 500
	// ThrottlingRetryCost is what a retry after a throttling error takes.
	ThrottlingRetryCost uint = 5
	// RetryCost is what any other retry takes (5xx, timeouts, connection
	// errors).
	RetryCost uint = 14
	// NoRetryIncrement is what an operation that succeeds at its first
	// attempt puts back.
	NoRetryIncrement uint = 1
)

// DynamoDB's own retry defaults, which its client applies only to a
// retryer it builds itself (so a shared retryer must restate them).
const (
	dynamoDBMaxAttempts = 4
	dynamoDBBaseDelay   = 25 * time.Millisecond
)

// Quota is a process's retry quota: one token bucket (the SDK's
// ratelimit.TokenRateLimit) that the standard retryer of every SDK client
// of the process draws on, whatever the service, so that while calls keep
// failing the whole process stops retrying instead of each client, and
// each call, retrying to its limit. Build one per process, in the wiring,
// before the clients; it is safe for concurrent use (the bucket takes a
// lock per operation).
//
// It brakes one process only: other execution environments of the same
// function have their own.
type Quota struct {
	bucket *ratelimit.TokenRateLimit
	logger *slog.Logger
	// mu makes taking tokens, flipping braking and logging the flip one
	// step, so that the lines follow the bucket's order: a retry granted
	// just after another was refused must not read as "retries again"
	// before "spent". The lines are rare (one per flip), so holding mu
	// while the handler writes costs the calls nothing in the steady state.
	mu      sync.Mutex
	braking bool // a retry was refused, and none granted since
}

// NewQuota returns a full quota of QuotaTokens. When the quota first
// refuses a retry, and when it grants one again, it logs one line to logger
// (nil: no line).
func NewQuota(logger *slog.Logger) *Quota {
	return &Quota{bucket: ratelimit.NewTokenRateLimit(QuotaTokens), logger: logger}
}

// Remaining is the number of tokens left in the bucket.
func (q *Quota) Remaining() uint { return q.bucket.Remaining() }

// GetToken implements retry.RateLimiter: the SDK's bucket, saying when it
// starts and stops refusing retries. The SDK calls it for retries only.
func (q *Quota) GetToken(ctx context.Context, cost uint) (func() error, error) {
	if completes(ctx) {
		// The write that records an action's outcome comes after its side
		// effect: braking it leaves the record IN_PROGRESS, and the next
		// delivery after the lease does the side effect again. It keeps its
		// own attempts (DynamoDB's 4) and takes nothing from the bucket.
		return noRelease, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	release, err := q.bucket.GetToken(ctx, cost)
	var spent ratelimit.QuotaExceededError
	refused := errors.As(err, &spent)
	started, ended := refused && !q.braking, err == nil && q.braking
	if started || ended {
		q.braking = started
	}
	switch {
	case q.logger == nil:
	case started:
		q.logger.Warn("the process's AWS retry quota is spent: calls are not retried until enough succeed",
			"quota_tokens_left", spent.Available, "quota_tokens_requested", spent.Requested)
	case ended:
		q.logger.Info("the process's AWS retry quota allows retries again", "quota_tokens_left", q.bucket.Remaining())
	}
	return release, err
}

// AddTokens implements retry.RateLimiter.
func (q *Quota) AddTokens(n uint) error { return q.bucket.AddTokens(n) }

// Share returns cfg with a retryer provider that gives every client built
// from it (NewFromConfig) its own standard retryer, with the SDK's default
// attempts and backoff, drawing on q. The SDK's clients for SQS and Secrets
// Manager build exactly that retryer themselves, with a bucket of their
// own. AWS_MAX_ATTEMPTS (cfg.RetryMaxAttempts) is still applied by each
// client on top. A cfg with a retryer already set, or in adaptive mode
// (AWS_RETRY_MODE=adaptive, whose retryer keeps its own buckets), is
// returned as it is.
func (q *Quota) Share(cfg aws.Config) aws.Config {
	if cfg.Retryer != nil || !standardMode(cfg.RetryMode) {
		return cfg
	}
	cfg.Retryer = func() aws.Retryer { return q.standard() }
	return cfg
}

// DynamoDB is a DynamoDB client option: its retryer becomes the standard
// one with DynamoDB's own defaults (4 attempts, 25 ms base backoff), drawing
// on q. In adaptive mode it does nothing. RetryMaxAttempts is still applied
// by the client on top.
func (q *Quota) DynamoDB(o *dynamodb.Options) {
	if !standardMode(o.RetryMode) {
		return
	}
	o.Retryer = q.standard(func(so *retry.StandardOptions) {
		so.MaxAttempts = dynamoDBMaxAttempts
		so.BaseDelay = dynamoDBBaseDelay
	})
}

func (q *Quota) standard(fns ...func(*retry.StandardOptions)) *retry.Standard {
	return retry.NewStandard(append([]func(*retry.StandardOptions){func(so *retry.StandardOptions) {
		so.RateLimiter = q
		so.RetryCost = RetryCost
		so.ThrottlingRetryCost = ThrottlingRetryCost
		so.NoRetryIncrement = NoRetryIncrement
	}}, fns...)...)
}

func standardMode(m aws.RetryMode) bool {
	return m == "" || m == aws.RetryModeStandard
}

// completionOperations are the DynamoDB operations the store records an
// outcome with: Complete and Fail (UpdateItem), and a completion with
// effects (TransactWriteItems). Reserve and TakeOver (PutItem), reads and
// every other service's calls come before any side effect: braked.
var completionOperations = map[string]bool{"UpdateItem": true, "TransactWriteItems": true}

// completes reports whether the call in ctx (the SDK's middleware context,
// which the retryer hands the rate limiter) records an action's outcome.
func completes(ctx context.Context) bool {
	return awsmiddleware.GetServiceID(ctx) == dynamodb.ServiceID && completionOperations[awsmiddleware.GetOperationName(ctx)]
}

func noRelease() error { return nil }

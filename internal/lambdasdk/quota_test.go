package lambdasdk_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/engineref"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/lambdasdk"
	"github.com/oncely/oncely/internal/queue"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/sqsbatch"
)

// throttlingAWS is a real HTTP server that answers every request as a
// throttled AWS JSON service does (400 and the error's __type), and counts
// what it received: every request, and the first attempts of operations
// (the SDK numbers each attempt in its amz-sdk-request header).
type throttlingAWS struct {
	srv            *httptest.Server
	requests       atomic.Int64
	first          atomic.Int64
	byTarget       sync.Map // X-Amz-Target -> *atomic.Int64
	missingAttempt atomic.Int64
}

func newThrottlingAWS(t *testing.T) *throttlingAWS {
	t.Helper()
	s := &throttlingAWS{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		switch h := r.Header.Get("Amz-Sdk-Request"); {
		case strings.HasPrefix(h, "attempt=1;"):
			s.first.Add(1)
		case !strings.HasPrefix(h, "attempt="):
			s.missingAttempt.Add(1)
		}
		target := r.Header.Get("X-Amz-Target")
		n, _ := s.byTarget.LoadOrStore(target, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		// DynamoDB's two throttling codes, and SQS's, each as its service
		// spells it on the wire (JSON protocols).
		typ := "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
		switch {
		case strings.HasPrefix(target, "AmazonSQS."):
			typ = "com.amazonaws.sqs#ThrottlingException"
			w.Header().Set("X-Amzn-Query-Error", "ThrottlingException;Sender")
		case n.(*atomic.Int64).Load()%2 == 0:
			typ = "com.amazonaws.dynamodb.v20120810#ThrottlingException"
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"__type":%q,"message":"Rate exceeded"}`, typ)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// quickBackoff keeps the SDK's retryer (its attempts, its retry quota) and
// only caps its sleeps, so that the test does not wait out throttling
// backoffs of up to seconds; what is counted does not depend on them.
func quickBackoff(r aws.Retryer) aws.Retryer {
	return retry.AddWithMaxBackoffDelay(r, time.Millisecond)
}

// TestRetryQuotaBrakesAThrottledProcess: eight invocations of ten records
// at once in one process (a Managed Instances environment), against a
// store that throttles every call, make at most their first attempts plus
// one process-wide quota's worth of retries, and acknowledge nothing; when
// SQS throttles too (the visibility changes of the records sent back), the
// retries of both clients together still fit in that one quota.
func TestRetryQuotaBrakesAThrottledProcess(t *testing.T) {
	for _, tt := range []struct {
		name       string
		visibility bool // the records' visibility changes, through the throttling SQS
	}{
		{"the store throttles", false},
		{"the store and the queue throttle", true},
	} {
		t.Run(tt.name, func(t *testing.T) { testRetryQuota(t, tt.visibility) })
	}
}

func testRetryQuota(t *testing.T, visibility bool) {
	const invocations, records = 8, 10
	srv := newThrottlingAWS(t)
	// As the function's wiring does: one quota for the process, shared by
	// the config every client is built from.
	var logs bytes.Buffer // written under the handler's lock
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	quota := lambdasdk.NewQuota(logger)
	cfg := quota.Share(awsConfig(srv.srv.URL))
	ddb := lambdasdk.DynamoDB(cfg, quota, func(o *dynamodb.Options) { o.Retryer = quickBackoff(o.Retryer) })
	sqsClient := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.Retryer = quickBackoff(o.Retryer) })
	// Every call fails, so no retry gives its tokens back.
	quotaRetries := lambdasdk.QuotaTokens / lambdasdk.ThrottlingRetryCost

	store, err := ddbstore.New(ddb, "records", "fn")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(idem.Options{Store: store, Lease: time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := keyexpr.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	o := sqsbatch.Options{Poison: store}
	if visibility {
		o.Backoff = &sqsbatch.Backoff{SQS: sqsClient, Base: time.Second, Max: time.Minute}
	}
	h, err := queue.New(engineref.Wrap(engine).(*oncely.Engine), keys, func(context.Context, action.Event) (action.Result, error) {
		ran.Add(1)
		return action.Result{}, nil
	}, o, queue.Proof{})
	if err != nil {
		t.Fatal(err)
	}

	responses := make([]events.SQSEventResponse, invocations)
	var wg sync.WaitGroup
	for i := range invocations {
		wg.Go(func() {
			// Generous: the capped backoffs make the whole run take well
			// under a second; the deadline only bounds a hang.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var ev events.SQSEvent
			for j := range records {
				id := fmt.Sprintf("evt-%d-%d", i, j)
				ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, EventSource: "aws:sqs",
					EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:oncely-events",
					Body:           fmt.Sprintf(`{"id":%q,"action":"notify"}`, id),
					Attributes:     map[string]string{"ApproximateReceiveCount": "1"}})
			}
			resp, _, err := h.Handle(ctx, ev)
			if err != nil {
				t.Errorf("invocation %d: %v", i, err)
			}
			responses[i] = resp
		})
	}
	wg.Wait()

	for i, resp := range responses {
		if got := len(resp.BatchItemFailures); got != records {
			t.Errorf("invocation %d: %d records in batchItemFailures, want all %d (nothing acknowledged in a throttle)", i, got, records)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the action ran %d times; want 0 (no reservation was made)", n)
	}
	if n := srv.missingAttempt.Load(); n != 0 {
		t.Fatalf("%d requests without the SDK's attempt number: the count below would mean nothing", n)
	}
	total, first := srv.requests.Load(), srv.first.Load()
	var perTarget []string
	srv.byTarget.Range(func(k, v any) bool {
		perTarget = append(perTarget, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d requests: %d first attempts, %d retries (%s)", total, first, total-first, strings.Join(perTarget, " "))
	if first < invocations*records {
		t.Errorf("%d first attempts; want at least one per record (%d)", first, invocations*records)
	}
	if retries := total - first; retries > int64(quotaRetries) {
		t.Errorf("%d retries for %d first attempts; want at most one process-wide quota's worth, %d", retries, first, quotaRetries)
	} else if retries == 0 {
		t.Error("no retry at all: the SDK's retries are gone, not braked")
	}
	// The operator is told once that the process stopped retrying (the
	// record lines only say STORE_UNAVAILABLE).
	if n := strings.Count(logs.String(), `"msg":"the process's AWS retry quota is spent`); n != 1 {
		t.Errorf("%d lines say the quota is spent; want 1", n)
	}
}

func awsConfig(endpoint string) aws.Config {
	return aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(endpoint)}
}

// Every client built from a shared config, and the DynamoDB client, draw on
// one bucket, and keep their services' own attempts; AWS_MAX_ATTEMPTS and
// adaptive mode are left to the SDK.
func TestQuotaIsSharedByEveryClient(t *testing.T) {
	var logs bytes.Buffer
	quota := lambdasdk.NewQuota(slog.New(slog.NewJSONHandler(&logs, nil)))
	cfg := quota.Share(awsConfig("http://127.0.0.1:1"))
	ddb := lambdasdk.DynamoDB(cfg, quota).Options().Retryer
	queue := sqs.NewFromConfig(cfg).Options().Retryer
	secrets := secretsmanager.NewFromConfig(cfg).Options().Retryer
	for _, c := range []struct {
		name     string
		r        aws.Retryer
		attempts int
	}{{"DynamoDB", ddb, 4}, {"SQS", queue, retry.DefaultMaxAttempts}, {"Secrets Manager", secrets, retry.DefaultMaxAttempts}} {
		if _, ok := c.r.(*retry.Standard); !ok || c.r.MaxAttempts() != c.attempts {
			t.Errorf("%s: retryer %T with %d attempts; want the standard retryer with its service's %d", c.name, c.r, c.r.MaxAttempts(), c.attempts)
		}
	}
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException"}
	other := &smithy.GenericAPIError{Code: "InternalServerError"}
	// One throttled retry from each, then drain the rest from DynamoDB's.
	for _, r := range []aws.Retryer{ddb, queue, secrets} {
		if _, err := r.GetRetryToken(context.Background(), throttled); err != nil {
			t.Fatalf("the first retry was refused: %v", err)
		}
	}
	if got, want := quota.Remaining(), lambdasdk.QuotaTokens-3*lambdasdk.ThrottlingRetryCost; got != want {
		t.Fatalf("%d tokens left after three throttled retries; want %d", got, want)
	}
	for range (lambdasdk.QuotaTokens - 3*lambdasdk.ThrottlingRetryCost) / lambdasdk.RetryCost {
		if _, err := ddb.GetRetryToken(context.Background(), other); err != nil {
			t.Fatalf("a retry was refused with %d tokens left: %v", quota.Remaining(), err)
		}
	}
	for name, r := range map[string]aws.Retryer{"SQS": queue, "Secrets Manager": secrets} {
		if _, err := r.GetRetryToken(context.Background(), other); err == nil {
			t.Errorf("%s retried with %d tokens left: its quota is not the DynamoDB client's", name, quota.Remaining())
		}
	}
	// A first-attempt success anywhere puts NoRetryIncrement back.
	before := quota.Remaining()
	release, _ := queue.(aws.RetryerV2).GetAttemptToken(context.Background())
	_ = release(nil)
	if got := quota.Remaining(); got != before+lambdasdk.NoRetryIncrement {
		t.Errorf("a success left %d tokens; want %d", got, before+lambdasdk.NoRetryIncrement)
	}

	// Once enough calls succeeded, a retry is granted again, and said so
	// once, after the one line that said it was spent.
	for range lambdasdk.ThrottlingRetryCost {
		_ = quota.AddTokens(lambdasdk.NoRetryIncrement)
	}
	for range 2 {
		if _, err := secrets.GetRetryToken(context.Background(), throttled); err != nil {
			t.Fatalf("a throttled retry was refused with %d tokens left: %v", quota.Remaining(), err)
		}
		_ = quota.AddTokens(lambdasdk.ThrottlingRetryCost)
	}
	if spent, again := strings.Count(logs.String(), "retry quota is spent"), strings.Count(logs.String(), "retry quota allows retries again"); spent != 1 || again != 1 {
		t.Errorf("logged %q; want one line saying the quota is spent, then one saying it allows retries again", logs.String())
	}

	// AWS_MAX_ATTEMPTS still applies, on the shared bucket.
	capped := cfg
	capped.RetryMaxAttempts = 2
	if got := lambdasdk.DynamoDB(capped, quota).Options().Retryer.MaxAttempts(); got != 2 {
		t.Errorf("RetryMaxAttempts 2 gave %d attempts", got)
	}
	// Adaptive mode keeps the SDK's own retryer and buckets.
	adaptive := awsConfig("http://127.0.0.1:1")
	adaptive.RetryMode = aws.RetryModeAdaptive
	adaptive = quota.Share(adaptive)
	if adaptive.Retryer != nil {
		t.Error("Share set a retryer in adaptive mode")
	}
	if r := lambdasdk.DynamoDB(adaptive, quota).Options().Retryer; !isAdaptive(r) {
		t.Errorf("adaptive mode got retryer %T; want the SDK's adaptive one", r)
	}
}

func isAdaptive(r aws.Retryer) bool {
	_, ok := r.(*retry.AdaptiveMode)
	return ok
}

// The quota's size and costs are the SDK's defaults: when an SDK upgrade
// changes those, this fails, and keeping ours or following is a decision
// to write down in quota.go.
func TestQuotaIsTheSDKsDefault(t *testing.T) {
	sdk := retry.NewStandard() // its own bucket, and the costs it charges
	throttled := &smithy.GenericAPIError{Code: "ThrottlingException"}
	other := &smithy.GenericAPIError{Code: "InternalServerError"}
	n := 0
	for ; n <= 1000; n++ {
		if _, err := sdk.GetRetryToken(context.Background(), throttled); err != nil {
			break
		}
	}
	if n != int(lambdasdk.QuotaTokens/lambdasdk.ThrottlingRetryCost) {
		t.Errorf("the SDK's bucket pays %d throttled retries; ours pays %d/%d", n, lambdasdk.QuotaTokens, lambdasdk.ThrottlingRetryCost)
	}
	if retry.DefaultRetryRateTokens != lambdasdk.QuotaTokens || retry.DefaultThrottlingRetryCost != lambdasdk.ThrottlingRetryCost || retry.DefaultNoRetryIncrement != lambdasdk.NoRetryIncrement {
		t.Errorf("the SDK's defaults are %d tokens, %d per throttled retry, %d per success; ours %d, %d, %d",
			retry.DefaultRetryRateTokens, retry.DefaultThrottlingRetryCost, retry.DefaultNoRetryIncrement, lambdasdk.QuotaTokens, lambdasdk.ThrottlingRetryCost, lambdasdk.NoRetryIncrement)
	}
	fresh := retry.NewStandard()
	n = 0
	for ; n <= 1000; n++ {
		if _, err := fresh.GetRetryToken(context.Background(), other); err != nil {
			break
		}
	}
	if n != int(lambdasdk.QuotaTokens/lambdasdk.RetryCost) {
		t.Errorf("the SDK's bucket pays %d other retries; ours pays %d/%d", n, lambdasdk.QuotaTokens, lambdasdk.RetryCost)
	}
}

// The write that records an action's outcome is never braked: with the
// quota spent, a reservation (PutItem) makes one attempt, and a completion
// (UpdateItem) or a completion with effects (TransactWriteItems) still
// makes DynamoDB's four. Braking it would leave the record IN_PROGRESS
// after the side effect, and the next delivery would do it again.
func TestTheQuotaNeverBrakesACompletion(t *testing.T) {
	quota := lambdasdk.NewQuota(nil)
	for {
		if _, err := quota.GetToken(context.Background(), lambdasdk.ThrottlingRetryCost); err != nil {
			break // spent
		}
	}
	for _, tt := range []struct {
		op   string
		call func(context.Context, *dynamodb.Client) error
		want int64
	}{
		{"PutItem", func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}})
			return err
		}, 1},
		{"UpdateItem", func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}})
			return err
		}, 4},
		{"TransactWriteItems", func(ctx context.Context, c *dynamodb.Client) error {
			_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}}}}})
			return err
		}, 4},
	} {
		t.Run(tt.op, func(t *testing.T) {
			down := newThrottlingAWS(t)
			client := lambdasdk.DynamoDB(awsConfig(down.srv.URL), quota, func(o *dynamodb.Options) { o.Retryer = quickBackoff(o.Retryer) })
			if err := tt.call(context.Background(), client); err == nil {
				t.Fatal("a throttled call succeeded")
			}
			if got := down.requests.Load(); got != tt.want {
				t.Errorf("%s made %d attempts with the quota spent; want %d", tt.op, got, tt.want)
			}
		})
	}
}

// blockingHandler records the messages logged, and holds the first one in
// Handle, before it is written, until proceed is closed: a slow log write
// at the worst moment.
type blockingHandler struct {
	mu       sync.Mutex
	held     bool
	messages []string
	entered  chan struct{}
	proceed  chan struct{}
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler            { return h }

func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	first := !h.held
	h.held = true
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.proceed
	}
	h.mu.Lock()
	h.messages = append(h.messages, r.Message)
	h.mu.Unlock()
	return nil
}

// The quota's lines follow the bucket's order: when a retry is granted
// right after the refusal that started the brake, "allows retries again"
// comes after "spent", even when writing "spent" is slow. (Logged after
// the lock, the grant's line came first.)
func TestQuotaLinesFollowTheBucketsOrder(t *testing.T) {
	h := &blockingHandler{entered: make(chan struct{}), proceed: make(chan struct{})}
	quota := lambdasdk.NewQuota(slog.New(h))
	ctx := context.Background() // no DynamoDB completion: braked
	if _, err := quota.GetToken(ctx, lambdasdk.QuotaTokens); err != nil {
		t.Fatal(err)
	}
	refused := make(chan error)
	go func() {
		_, err := quota.GetToken(ctx, lambdasdk.ThrottlingRetryCost)
		refused <- err
	}()
	<-h.entered // the refusal is writing "spent"
	if err := quota.AddTokens(lambdasdk.QuotaTokens); err != nil {
		t.Fatal(err)
	}
	granted := make(chan error)
	go func() {
		_, err := quota.GetToken(ctx, lambdasdk.ThrottlingRetryCost)
		granted <- err
	}()
	// The grant waits for the refusal's line; without that, it logs its own
	// line meanwhile. Either way the refusal's line is let go: when the
	// grant finishes first, or after a while.
	select {
	case err := <-granted:
		close(h.proceed)
		if err != nil {
			t.Errorf("the retry after the tokens came back: %v; want it granted", err)
		}
	case <-time.After(500 * time.Millisecond):
		close(h.proceed)
		if err := <-granted; err != nil {
			t.Errorf("the retry after the tokens came back: %v; want it granted", err)
		}
	}
	if err := <-refused; err == nil {
		t.Errorf("the retry on an empty bucket was granted; want it refused")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	want := []string{
		"the process's AWS retry quota is spent: calls are not retried until enough succeed",
		"the process's AWS retry quota allows retries again",
	}
	if !slices.Equal(h.messages, want) {
		t.Errorf("lines %q; want %q", h.messages, want)
	}
}

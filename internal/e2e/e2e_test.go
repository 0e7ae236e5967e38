// Package e2e drives the real bootstrap under the AWS Lambda Runtime
// Interface Emulator, against a moto server and a real HTTP downstream.
// `make test` provides the emulator and moto; run alone, the tests skip.
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/sqslocal"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

// Environment the tests read.
const (
	envRIE     = "IDEM_TEST_RIE"    // path to aws-lambda-rie
	envRequire = "IDEM_REQUIRE_E2E" // make a missing emulator or moto a failure
	// envRequireManaged makes the managed-instances test fail, rather than
	// skip, when not run as root (make test sets it when run as root).
	envRequireManaged = "IDEM_REQUIRE_MANAGED"
)

var bootstrap string

func TestMain(m *testing.M) {
	code := func() int {
		if os.Getenv(envRIE) == "" || os.Getenv(ddblocal.EnvMoto) == "" {
			return m.Run() // each test skips, or fails under envRequire
		}
		dir, err := os.MkdirTemp("", "oncely-e2e")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bootstrap = filepath.Join(dir, "bootstrap")
		// The same build as the deployed one, for this machine.
		build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bootstrap, "github.com/oncely/oncely/cmd/handler")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build bootstrap: %v\n%s", err, out)
			return 1
		}
		if err := buildOncelyctl(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// fn is one deployed-like function: its own table, downstream and emulator.
type fn struct {
	t       *testing.T
	emu     *rie.Emulator
	down    *fakewebhook.Server
	downURL string // where the function delivers
	hookURL string // the downstream's base URL
	name    string // AWS_LAMBDA_FUNCTION_NAME, the records' namespace
	table   string
	client  *dynamodb.Client
	secret  string // the signing secret's value, as receivers get it (whsec_…)
	// secretARN is the signing secret; sm the Secrets Manager it is on, at
	// the endpoint secrets.
	secretARN string
	sm        *secretsmanager.Client
	secrets   string
}

func start(t *testing.T, timeoutSeconds int, env ...string) *fn {
	t.Helper()
	return startWith(t, fnOptions{timeout: timeoutSeconds, env: env})
}

// fnOptions start a function unlike the others.
type fnOptions struct {
	timeout int      // AWS_LAMBDA_FUNCTION_TIMEOUT, seconds
	env     []string // added to the function's environment (later entries win)
	// bootstrap is the binary to run; empty means the package's bootstrap.
	bootstrap string
	// store, if set, returns the DynamoDB endpoint the function uses,
	// given moto's (a proxy in front of it); nil means moto itself.
	store func(moto string) string
	// secrets is the Secrets Manager endpoint; empty means moto's.
	secrets string
	// down, at downURL, is the downstream; nil means a new one.
	down    *fakewebhook.Server
	downURL string
	// name is AWS_LAMBDA_FUNCTION_NAME (the namespace); empty means oncely-e2e.
	name string
}

// requireE2E skips the test when the emulator or moto is missing (or
// fails it, under envRequire).
func requireE2E(t *testing.T) {
	t.Helper()
	if bootstrap == "" {
		if os.Getenv(envRequire) != "" {
			t.Fatalf("%s and %s are required (make test sets them)", envRIE, ddblocal.EnvMoto)
		}
		t.Skipf("set %s and %s (make test does) to run the end-to-end tests", envRIE, ddblocal.EnvMoto)
	}
}

func startWith(t *testing.T, o fnOptions) *fn {
	t.Helper()
	requireE2E(t)
	moto := os.Getenv(ddblocal.EnvMoto)
	f := &fn{t: t, down: o.down}
	if f.down == nil {
		f.down = fakewebhook.New()
		hs := httptest.NewServer(f.down)
		t.Cleanup(func() { f.down.Close(); hs.Close() })
		f.hookURL = hs.URL
		f.downURL = hs.URL + "/webhook"
	} else {
		f.downURL = o.downURL
		f.hookURL = strings.TrimSuffix(o.downURL, "/webhook")
	}
	f.client, _ = ddblocal.Client(ddblocal.Config(moto, nil))
	f.table = ddblocal.NewTable(t, f.client)
	// Every function signs its deliveries, as deployed: with a secret made
	// the way the template makes it (32 characters, no punctuation).
	value := webhooksender.Alphanumeric(32)
	f.secret = "whsec_" + value
	f.secrets = cmp.Or(o.secrets, moto)
	sm := secretsmanager.NewFromConfig(ddblocal.Config(f.secrets, nil))
	out, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: aws.String("oncely-e2e-" + webhooksender.Alphanumeric(8)), SecretString: &value})
	if err != nil {
		t.Fatal(err)
	}
	f.sm, f.secretARN = sm, *out.ARN
	store, boot := moto, cmp.Or(o.bootstrap, bootstrap)
	f.name = cmp.Or(o.name, "oncely-e2e")
	if o.store != nil {
		store = o.store(moto)
	}
	f.emu, err = rie.Start(rie.Options{RIE: os.Getenv(envRIE), Bootstrap: boot, Env: rie.Local{
		DynamoDB: store, SQS: sqslocal.EndpointFromEnv(), SecretsManager: f.secrets, Table: f.table, DownstreamURL: f.downURL, Name: f.name,
		TimeoutSeconds: o.timeout, WebhookSecret: *out.ARN,
		Extra: append([]string{"AWS_LAMBDA_LOG_FORMAT=JSON", "NOTIFY_TIMEOUT=1s", "IDEMPOTENCY_BACKOFF_BASE=10ms", "IDEMPOTENCY_BACKOFF_MAX=50ms"}, o.env...),
	}.Env()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.emu.Stop()
		if t.Failed() {
			t.Logf("emulator and function output:\n%s", f.emu.Log())
		}
	})
	return f
}

func sqsBatch(t *testing.T, msgs ...[2]string) []byte {
	t.Helper()
	var ev events.SQSEvent
	for _, m := range msgs {
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId: m[0], ReceiptHandle: "rh-" + m[0], Body: m[1], EventSource: "aws:sqs",
			EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:oncely-events", AWSRegion: "us-east-1",
			Attributes: map[string]string{"ApproximateReceiveCount": "1"},
		})
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sqs invokes the function with a batch and returns the ids it sent back.
func (f *fn) sqs(payload []byte) []string {
	f.t.Helper()
	body, err := f.emu.Invoke(context.Background(), payload)
	if err != nil {
		f.t.Fatal(err)
	}
	var resp struct {
		BatchItemFailures []struct{ ItemIdentifier string } `json:"batchItemFailures"`
		ErrorMessage      string                            `json:"errorMessage"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.ErrorMessage != "" {
		f.t.Fatalf("invoke answered %q (%v); want an SQS batch response", body, err)
	}
	ids := []string{}
	for _, r := range resp.BatchItemFailures {
		ids = append(ids, r.ItemIdentifier)
	}
	return ids
}

func (f *fn) record(key string) map[string]types.AttributeValue {
	f.t.Helper()
	out, err := f.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &f.table, ConsistentRead: new(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: f.name + "#" + key}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out.Item
}

func s(item map[string]types.AttributeValue, a string) string {
	switch v := item[a].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprint(v.Value)
	}
	return ""
}

const (
	key42  = "evt:release-42:notify"
	body42 = `{"id":"release-42","action":"notify"}`
)

func TestE2EDuplicateInTwoInvocationsCallsDownstreamOnce(t *testing.T) {
	f := start(t, 10)
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 0 {
		t.Fatalf("first invocation failures %v", ids)
	}
	if ids := f.sqs(sqsBatch(t, [2]string{"m2", body42})); len(ids) != 0 {
		t.Fatalf("second invocation failures %v", ids)
	}
	if n := f.down.Count(key42); n != 1 {
		t.Errorf("downstream deliveries %d; want 1", n)
	}
	if rec := f.record(key42); s(rec, "status") != "SUCCEEDED" {
		t.Errorf("record %v; want SUCCEEDED", rec)
	}
}

func TestE2ETransient503ThenRedeliveredAndAcknowledged(t *testing.T) {
	f := start(t, 10)
	f.down.Script(key42, fakewebhook.Reply{Status: 503, RetryAfter: "60"})
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 1 || ids[0] != "m1" {
		t.Fatalf("failures %v; want [m1]", ids)
	}
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 0 {
		t.Fatalf("redelivery failures %v; want none", ids)
	}
	if n := f.down.Count(key42); n != 2 {
		t.Errorf("deliveries %d; want 2", n)
	}
}

func TestE2EPermanent404RecordedAndReplayed(t *testing.T) {
	f := start(t, 10)
	f.down.Script(key42, fakewebhook.Reply{Status: 404})
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 0 {
		t.Fatalf("failures %v; want none", ids)
	}
	if rec := f.record(key42); s(rec, "status") != "FAILED" || s(rec, "error_code") != "HTTP_404" || s(rec, "retryable") != "false" {
		t.Fatalf("record %v; want FAILED HTTP_404", rec)
	}
	if ids := f.sqs(sqsBatch(t, [2]string{"m2", body42})); len(ids) != 0 {
		t.Fatalf("redelivery failures %v", ids)
	}
	if n := f.down.Count(key42); n != 1 {
		t.Errorf("deliveries %d; want 1", n)
	}
}

// TestE2ECrashMidAction kills the runtime while the downstream holds the
// request. The handler itself never outlives its lease (the action's ctx
// ends before the invocation deadline, so a timeout is released, not
// crashed), so the crash is a real SIGKILL of the bootstrap process.
func TestE2ECrashMidAction(t *testing.T) {
	// The lease is the invocation's deadline. The in-lease redelivery below
	// (a kill, a cold start, two moto calls) must land before it even on a
	// loaded machine, so the deadline is generous.
	const timeout = 8
	f := start(t, timeout, "NOTIFY_TIMEOUT=3s")
	f.down.Script(key42, fakewebhook.Reply{Hang: true})
	crashed := make(chan []byte)
	invoked := time.Now()
	go func() {
		body, _ := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body42}))
		crashed <- body
	}()
	for deadline := time.Now().Add(10 * time.Second); f.down.Count(key42) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the delivery never reached the downstream")
		}
	}
	if err := f.emu.KillRuntime(); err != nil {
		t.Fatal(err)
	}
	if body := <-crashed; strings.Contains(string(body), "batchItemFailures") {
		t.Fatalf("the crashed invocation answered %q; want an error", body)
	}
	rec := f.record(key42)
	if s(rec, "status") != "IN_PROGRESS" {
		t.Fatalf("after the crash: %v; want IN_PROGRESS", rec)
	}
	// Before the lease ends: the key is held; the message goes back.
	if late := time.Since(invoked); late > timeout*time.Second {
		t.Fatalf("the in-lease redelivery starts %v after the invoke, past the %ds lease: the machine is too slow for this test's timing", late, timeout)
	}
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 1 || ids[0] != "m1" {
		t.Fatalf("redelivery inside the lease: failures %v; want [m1]", ids)
	}
	if n := f.down.Count(key42); n != 1 {
		t.Fatalf("deliveries %d inside the lease; want 1", n)
	}
	// After the lease (the crashed invocation's deadline, as the record
	// says: the emulator's clock started it, not ours): take over, complete.
	leaseMS, err := strconv.ParseInt(s(rec, "lease_until"), 10, 64)
	if err != nil {
		t.Fatalf("lease_until %q: %v", s(rec, "lease_until"), err)
	}
	time.Sleep(time.Until(time.UnixMilli(leaseMS).Add(300 * time.Millisecond)))
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 0 {
		t.Fatalf("redelivery after the lease: failures %v; want none", ids)
	}
	rec = f.record(key42)
	if s(rec, "status") != "SUCCEEDED" || s(rec, "attempts") != "2" {
		t.Errorf("final record status %s attempts %s; want SUCCEEDED 2", s(rec, "status"), s(rec, "attempts"))
	}
	if n := f.down.Count(key42); n != 2 {
		t.Errorf("deliveries %d; want 2 (the crashed one and the take-over)", n)
	}
}

func apiPayload(t *testing.T, key, body string) []byte {
	t.Helper()
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /events", RawPath: "/events", Body: body,
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": key},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "req-1", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events"},
		},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestE2EAPIRequestReplayAndReuse(t *testing.T) {
	f := start(t, 10)
	call := func(body string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		raw, err := f.emu.Invoke(context.Background(), apiPayload(t, "order-7f3a9c21", body))
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
			t.Fatalf("invoke answered %q; want an HTTP API response", raw)
		}
		return resp
	}
	first := call(body42)
	if first.StatusCode != 200 {
		t.Fatalf("first: %d %s", first.StatusCode, first.Body)
	}
	replay := call(body42)
	if replay.StatusCode != 200 || replay.Body != first.Body || replay.Headers["Idempotent-Replayed"] != "true" {
		t.Fatalf("replay: %d %v %q", replay.StatusCode, replay.Headers, replay.Body)
	}
	if changed := call(`{"id":"release-42","action":"notify","extra":1}`); changed.StatusCode != 422 {
		t.Fatalf("changed body: %d %s; want 422", changed.StatusCode, changed.Body)
	}
	if n := f.down.Count(apigw.ScopedKey("anonymous", "order-7f3a9c21")); n != 1 {
		t.Errorf("deliveries %d; want 1", n)
	}
}

func TestE2EBadConfigurationFailsInitWithOneLine(t *testing.T) {
	f := start(t, 10, "IDEMPOTENCY_TTL=forever")
	body, err := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body42}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "batchItemFailures") || !strings.Contains(string(body), "errorType") {
		t.Fatalf("a misconfigured function answered %q; want a function error, never a batch response", body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(f.emu.Log(), `config: IDEMPOTENCY_TTL: want a positive Go duration such as 500ms, 3s or 24h, got "forever"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the init error does not name the variable:\n%s", f.emu.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if f.down.Total() != 0 {
		t.Errorf("a misconfigured function delivered")
	}
}

// A misspelled table fails the init with one line naming the table and
// DynamoDB's error code, instead of every message failing with a log line
// that names neither.
func TestE2EMisspelledTableFailsInit(t *testing.T) {
	typo := "idem-tabel-" + webhooksender.Alphanumeric(8)
	f := start(t, 10, "IDEMPOTENCY_TABLE="+typo)
	body, err := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body42}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "batchItemFailures") || !strings.Contains(string(body), "errorType") {
		t.Fatalf("a function on a missing table answered %q; want a function error, never a batch response", body)
	}
	want := `config: IDEMPOTENCY_TABLE: dynamodb GetItem on table "` + typo + `": ResourceNotFoundException`
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(f.emu.Log(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the init error does not name the table and the error code:\n%s", f.emu.Log())
		}
	}
	if f.down.Total() != 0 {
		t.Errorf("a function on a missing table delivered")
	}
}

// Package ddblocal starts and connects to the DynamoDB-compatible servers
// the tests, the demo and the benchmarks use: minidyn in-process, moto out
// of process (started by make), and real DynamoDB when asked to. It counts
// the calls a store makes, and speaks DynamoDB's error replies for package
// faults.
//
// It is test support and does not import package testing, so the commands
// that use it (bench, demo) do not link it: test helpers take a TB, which
// *testing.T and *testing.B satisfy.
package ddblocal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/truora/minidyn/server"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/internal/testing/sdkhttp"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Environment variables the tests read.
const (
	// EnvMoto is the moto server's endpoint, set by `make test`.
	EnvMoto = "IDEM_TEST_MOTO_ENDPOINT"
	// EnvMotoSoak is a moto server for the chaos soak alone (its load would
	// slow every other test's calls), set by tools/with-moto.sh.
	EnvMotoSoak = "IDEM_TEST_MOTO_SOAK_ENDPOINT"
	// EnvRequireMoto makes a missing moto endpoint a failure, not a skip.
	EnvRequireMoto = "IDEM_REQUIRE_MOTO"
	// EnvAWSTable opts into running against a real DynamoDB table (with the
	// ambient AWS credentials and region).
	EnvAWSTable = "IDEM_TEST_AWS_TABLE"
)

// Minidyn starts minidyn's DynamoDB server in-process, for this test only,
// and returns it and its endpoint.
func Minidyn(t TB) (*server.Server, string) {
	t.Helper()
	srv := server.NewServer()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// MotoEndpoint returns the moto server's endpoint. It skips the test when
// there is none, unless EnvRequireMoto is set (as make test does).
func MotoEndpoint(t TB) string {
	t.Helper()
	ep := os.Getenv(EnvMoto)
	if ep == "" {
		if os.Getenv(EnvRequireMoto) != "" {
			t.Fatalf("%s is set but %s is empty: make test starts moto and sets it", EnvRequireMoto, EnvMoto)
		}
		t.Skipf("%s is not set; run through `make test` to start moto", EnvMoto)
	}
	return ep
}

// Counter counts DynamoDB operations by name, one per API call (SDK
// retries of one call count once).
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

// Counts returns a copy of the counts by operation.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total returns the number of calls.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
}

// Middleware returns an SDK API option that counts every operation.
func (c *Counter) Middleware() func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("ddbtestCountCalls",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.mu.Lock()
				if c.counts == nil {
					c.counts = map[string]int{}
				}
				c.counts[awsmiddleware.GetOperationName(ctx)]++
				c.mu.Unlock()
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}
}

// Config returns an SDK config for a local server at endpoint, with dummy
// credentials. transport may be nil (the SDK's default client). The HTTP
// client hands the transport its own copy of each request body
// (sdkhttp): without it, a call the server answered is sent again now and
// then on a busy machine.
func Config(endpoint string, transport http.RoundTripper) aws.Config {
	var next aws.HTTPClient = awshttp.NewBuildableClient()
	if transport != nil {
		next = &http.Client{Transport: transport}
	}
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   sdkhttp.New(next),
	}
}

// Client returns a DynamoDB client for cfg whose calls are counted.
func Client(cfg aws.Config) (*dynamodb.Client, *Counter) {
	c := &Counter{}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, c.Middleware())
	})
	return client, c
}

// NewTable creates a uniquely named table on the server and returns its
// name. A server without the TTL API is accepted: records are checked for
// expiry at read time and in conditions anyway.
func NewTable(t TB, client *dynamodb.Client) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "idem-test-" + hex.EncodeToString(b[:])
	if _, err := ddbstore.CreateTable(context.Background(), client, name); err != nil && !errors.Is(err, ddbstore.ErrNoTTL) {
		t.Fatalf("create table: %v", err)
	}
	return name
}

// NewTableKeyedBy creates a table named name whose only key is a hash key
// attr of type S: another key schema than the store's, for the tests of
// what a misconfigured table does.
func NewTableKeyedBy(t TB, client *dynamodb.Client, name, attr string) string {
	t.Helper()
	if _, err := client.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: &name, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &attr, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &attr, KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	return name
}

// Operation returns the DynamoDB operation a request calls (PutItem, ...).
func Operation(req *http.Request) string {
	return strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
}

// StoreOperations are the operations ddbstore calls on the request path.
var StoreOperations = []string{"PutItem", "UpdateItem", "GetItem", "DeleteItem", "TransactWriteItems", "Scan", "Query"}

// Replies answers a fault as DynamoDB does on the wire.
func Replies(k faults.Kind, req *http.Request) *http.Response {
	status, typ := 400, ""
	switch k {
	case faults.Throttle:
		typ = "ThrottlingException"
	case faults.ServerError:
		status, typ = 500, "InternalServerError"
	case faults.Unavailable:
		status, typ = 503, "ServiceUnavailable"
	case faults.MissingTable:
		typ = "ResourceNotFoundException"
	case faults.AccessDenied:
		typ = "AccessDeniedException"
	default:
		status, typ = 500, "InternalServerError"
	}
	return ErrorReply(req, status, typ)
}

// ErrorReply is a DynamoDB JSON error reply of the given status and type.
func ErrorReply(req *http.Request, status int, typ string) *http.Response {
	body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":"injected %s"}`, typ, typ)
	return &http.Response{
		StatusCode: status, Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Errortype": {typ}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req,
	}
}

// Describe names a DynamoDB request for a fault proxy's log: its operation
// (from X-Amz-Target) and the key of the item it reads or writes (the
// request's Key or Item pk, "<namespace>#<key>"), empty if it has none.
func Describe(req *http.Request, body []byte) (op, key string) {
	var in struct {
		Key, Item map[string]struct {
			S *string `json:"S"`
		}
	}
	op = Operation(req)
	if json.Unmarshal(body, &in) == nil {
		for _, m := range []map[string]struct {
			S *string `json:"S"`
		}{in.Key, in.Item} {
			if v, ok := m[ddbstore.AttrPK]; ok && v.S != nil {
				return op, *v.S
			}
		}
	}
	return op, ""
}

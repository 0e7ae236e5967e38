package lambdasdk

import (
	"context"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
)

// The cache answers what the SDK's resolver answers, for every kind of
// endpoint a function may be configured with: FIPS, dual-stack, both,
// other partitions, a custom endpoint, account-id modes, table ARNs.
func TestCachedEndpointsEqualTheSDKs(t *testing.T) {
	sdk := dynamodb.NewDefaultEndpointResolverV2()
	cached := newCachedResolver(nil)
	s, b := aws.String, aws.Bool
	var cases []dynamodb.EndpointParameters
	for _, region := range []string{"us-east-1", "us-gov-west-1", "cn-north-1", "eu-west-1"} {
		for _, fips := range []bool{false, true} {
			for _, dual := range []bool{false, true} {
				cases = append(cases, dynamodb.EndpointParameters{Region: s(region), UseFIPS: b(fips), UseDualStack: b(dual), ResourceArn: s("records")})
			}
		}
		cases = append(cases,
			dynamodb.EndpointParameters{Region: s(region), UseFIPS: b(false), UseDualStack: b(false), Endpoint: s("http://127.0.0.1:8000")},
			dynamodb.EndpointParameters{Region: s(region), UseFIPS: b(false), UseDualStack: b(false), AccountId: s("123456789012"), AccountIdEndpointMode: s("preferred")},
			dynamodb.EndpointParameters{Region: s(region), UseFIPS: b(false), UseDualStack: b(false), AccountId: s("123456789012"), AccountIdEndpointMode: s("disabled")},
			dynamodb.EndpointParameters{Region: s(region), UseFIPS: b(false), UseDualStack: b(false), ResourceArn: s("arn:aws:dynamodb:" + region + ":123456789012:table/records")},
		)
	}
	for _, p := range cases {
		for range 2 { // the second answer comes from the cache
			want, werr := sdk.ResolveEndpoint(context.Background(), p)
			got, gerr := cached.ResolveEndpoint(context.Background(), p)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%s: error %v, want %v", paramsKey(p), gerr, werr)
			}
			if diff := cmp.Diff(want.URI.String(), got.URI.String()); diff != "" || !reflect.DeepEqual(want.Headers, got.Headers) {
				t.Errorf("%s: endpoint (-sdk +cached):\n%s", paramsKey(p), diff)
			}
		}
	}
	if got := len(cached.seen); got > maxCachedEndpoints {
		t.Errorf("the cache holds %d endpoints; want at most %d", got, maxCachedEndpoints)
	}
	// An error (no region) is not remembered.
	if _, err := cached.ResolveEndpoint(context.Background(), dynamodb.EndpointParameters{UseFIPS: b(false), UseDualStack: b(false)}); err == nil {
		t.Error("no region resolved without an error")
	}
}

// Every endpoint parameter is part of the cache's key: a parameter the SDK
// adds must be added to paramsKey, or two calls that differ only in it
// would share an endpoint.
func TestParamsKeyCoversEveryParameter(t *testing.T) {
	typ := reflect.TypeFor[dynamodb.EndpointParameters]()
	s, b := aws.String, aws.Bool
	base := dynamodb.EndpointParameters{}
	variants := map[string]dynamodb.EndpointParameters{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		p := base
		v := reflect.ValueOf(&p).Elem().Field(i)
		switch v.Interface().(type) {
		case *string:
			v.Set(reflect.ValueOf(s("x")))
		case *bool:
			v.Set(reflect.ValueOf(b(false)))
		case []string:
			v.Set(reflect.ValueOf([]string{"x"}))
		default:
			t.Fatalf("EndpointParameters.%s is a %s: teach paramsKey about it", f.Name, f.Type)
		}
		variants[f.Name] = p
	}
	keys := map[string]string{paramsKey(base): "(none)"}
	for name, p := range variants {
		k := paramsKey(p)
		if other, dup := keys[k]; dup {
			t.Errorf("setting %s gives the same key as setting %s: %q", name, other, k)
		}
		keys[k] = name
	}
	if p := (dynamodb.EndpointParameters{UseFIPS: b(true)}); paramsKey(p) == paramsKey(dynamodb.EndpointParameters{UseFIPS: b(false)}) {
		t.Error("FIPS on and off share a key")
	}
}

func localConfig(endpoint string) aws.Config {
	return aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: aws.String(endpoint)}
}

func putInput() *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{TableName: aws.String("records"), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "oncely-prod-NotifyFunction-1A2B3C4D5E6F#evt:9f1c2d3e-4b5a-4c89-abcd-ef0123456789:notify"},
	}}
}

// BenchmarkPutItem is the SDK's cost per call against a local server that
// answers at once, with each option alone and all of them (Lean). On a
// shared machine wall time (ns/op) is mostly waiting; cpu-ns/op is the
// process's CPU time (user+system, from getrusage) per call, the local
// server's share included (the same for every variant), and allocations
// count the server's too.
func BenchmarkPutItem(b *testing.B) {
	body := []byte(`{}`)
	crc := strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", crc)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	quota := NewQuota(nil)
	for _, v := range []struct {
		name string
		opt  func(*dynamodb.Options)
	}{
		{"sdk-defaults", func(*dynamodb.Options) {}},
		{"cached-endpoint", func(o *dynamodb.Options) { o.EndpointResolverV2 = newCachedResolver(nil) }},
		{"account-id-endpoints-off", func(o *dynamodb.Options) { o.AccountIDEndpointMode = aws.AccountIDEndpointModeDisabled }},
		{"no-retry-quota", func(o *dynamodb.Options) {
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) { so.RateLimiter = ratelimit.None })
		}},
		{"no-crc32", func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }},
		{"lean", Lean},
		{"lean-shared-quota", func(o *dynamodb.Options) { Lean(o); quota.DynamoDB(o) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			client := dynamodb.NewFromConfig(localConfig(srv.URL), v.opt)
			in := putInput()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := client.PutItem(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

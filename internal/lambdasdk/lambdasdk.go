// Package lambdasdk builds the AWS SDK clients the function uses on its
// request path, with the SDK's own options set for a Lambda function: it
// drops per-call work a function does not need, and keeps what correctness
// on AWS needs (FIPS, dual-stack and custom endpoints, SigV4, the retryer's
// backoff and attempts). It also holds the process's retry quota (Quota,
// in quota.go), which every client of the process shares.
//
// What each option changes, and why it is safe (BENCHMARKS.md has what each
// saves):
//
//   - Endpoint resolution once per parameter set (cachedResolver). The
//     SDK evaluates DynamoDB's endpoint rule set on every call; its result
//     is a pure function of the parameters (region, FIPS, dual-stack, custom
//     endpoint, account id and mode, the table), so the resolver remembers
//     the answer for each set it saw. A custom endpoint
//     (AWS_ENDPOINT_URL_DYNAMODB), FIPS and dual-stack are parameters, so
//     they resolve exactly as without the cache.
//   - Account-id endpoints off (AccountIDEndpointMode disabled). With
//     "preferred", the default, the SDK routes to <account>.ddb.<region>
//     when the credentials carry an account id. A Lambda's credentials come
//     from its reserved environment variables, which carry none (the SDK
//     would read AWS_ACCOUNT_ID, which Lambda does not set), so the function
//     already uses the regional endpoint; disabling the mode keeps it so
//     whatever the environment says and skips the account-id rules on every
//     call. The regional endpoint is the one DynamoDB documents for every
//     API, FIPS and dual-stack included.
//   - No CRC32 check of DynamoDB responses (DisableValidateResponseChecksum).
//     DynamoDB sends X-Amz-Crc32 and the SDK hashes every response body to
//     compare it. The connection to DynamoDB is TLS, whose record
//     authentication already rejects a corrupted or altered response; the
//     CRC adds nothing over it for a function that talks to AWS directly.
package lambdasdk

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// DynamoDB returns the DynamoDB client for cfg with Lean applied, whose
// retries draw on q (see Quota.DynamoDB), then opts. A nil q leaves the
// SDK's own retryer, with a retry quota of the client's own.
func DynamoDB(cfg aws.Config, q *Quota, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	fns := []func(*dynamodb.Options){Lean}
	if q != nil {
		fns = append(fns, q.DynamoDB)
	}
	return dynamodb.NewFromConfig(cfg, append(fns, opts...)...)
}

// Lean sets the options described in the package comment on o. Every
// option is the SDK's own; none changes what is sent to DynamoDB, and none
// touches the retryer.
func Lean(o *dynamodb.Options) {
	o.EndpointResolverV2 = newCachedResolver(o.EndpointResolverV2)
	o.AccountIDEndpointMode = aws.AccountIDEndpointModeDisabled
	o.DisableValidateResponseChecksum = true
}

// maxCachedEndpoints bounds the cache: a function uses one or two tables in
// one region, so a few entries cover it; past the bound, endpoints are
// resolved per call, as without the cache.
const maxCachedEndpoints = 32

// cachedResolver remembers the endpoint the SDK's resolver gives each set
// of parameters. It is safe for concurrent use.
type cachedResolver struct {
	next dynamodb.EndpointResolverV2
	mu   sync.RWMutex
	seen map[string]smithyendpoints.Endpoint
}

func newCachedResolver(next dynamodb.EndpointResolverV2) *cachedResolver {
	if next == nil {
		next = dynamodb.NewDefaultEndpointResolverV2()
	}
	if c, ok := next.(*cachedResolver); ok {
		return c
	}
	return &cachedResolver{next: next, seen: map[string]smithyendpoints.Endpoint{}}
}

// ResolveEndpoint implements dynamodb.EndpointResolverV2. The endpoint it
// returns is shared between calls: the SDK's middleware copies its URL and
// only reads its headers and properties.
func (c *cachedResolver) ResolveEndpoint(ctx context.Context, p dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	key := paramsKey(p)
	c.mu.RLock()
	e, ok := c.seen[key]
	c.mu.RUnlock()
	if ok {
		return e, nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err // errors (a missing region) are not remembered
	}
	c.mu.Lock()
	if len(c.seen) < maxCachedEndpoints {
		c.seen[key] = e
	}
	c.mu.Unlock()
	return e, nil
}

// paramsKey is every endpoint parameter, each field told apart from an
// unset one.
func paramsKey(p dynamodb.EndpointParameters) string {
	var b strings.Builder
	str := func(s *string) {
		if s == nil {
			b.WriteString("-|")
			return
		}
		b.WriteString(strconv.Quote(*s))
		b.WriteByte('|')
	}
	flag := func(v *bool) {
		switch {
		case v == nil:
			b.WriteString("-|")
		case *v:
			b.WriteString("1|")
		default:
			b.WriteString("0|")
		}
	}
	str(p.Region)
	flag(p.UseDualStack)
	flag(p.UseFIPS)
	str(p.Endpoint)
	str(p.AccountId)
	str(p.AccountIdEndpointMode)
	str(p.ResourceArn)
	flag(p.IsSearchOperation)
	b.WriteString(strconv.Itoa(len(p.ResourceArnList)))
	for _, a := range p.ResourceArnList {
		b.WriteByte('|')
		b.WriteString(strconv.Quote(a))
	}
	return b.String()
}

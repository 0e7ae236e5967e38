package apigw_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/apigw"
)

const pool = "us-east-1:0f6b2c1e-0000-4000-8000-000000000001"

func TestScope(t *testing.T) {
	tests := []struct {
		name string
		auth *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
		want string // "" for a request refused with 401
	}{
		{"no authorizer", nil, "anonymous"},
		{"a JWT from the configured issuer", jwt(map[string]string{"sub": "user-1", "iss": issuer}), "jwt:user-1"},
		{"a JWT from another issuer: qualified by it", jwt(map[string]string{"sub": "user-1", "iss": "https://evil.example"}), `jwt@"https://evil.example":user-1`},
		{"a JWT without iss", jwt(map[string]string{"sub": "user-1"}), `jwt@"":user-1`},
		{"an issuer and subject that would spell another pair's scope", jwt(map[string]string{"sub": `x":user-1`, "iss": "https://evil.example"}), `jwt@"https://evil.example":x":user-1`},
		{"a JWT without sub", jwt(map[string]string{"iss": issuer, "client_id": "tenant-b"}), ""},
		{"a JWT without claims", jwt(nil), ""},
		{"an IAM user", iam("arn:aws:iam::111122223333:user/ci"), "iam:arn:aws:iam::111122223333:user/ci"},
		{"an assumed role: by role, not session", iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"another session of the same role", iam("arn:aws:sts::111122223333:assumed-role/Publisher/task-42"), "iam:arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"a Cognito identity: by identity, not the pool's role", cognito(pool, "us-east-1:aaaaaaaa-0000-4000-8000-00000000000a"), "cognito:" + pool + "/us-east-1:aaaaaaaa-0000-4000-8000-00000000000a"},
		{"IAM without a principal", iam(""), ""},
		{"a Lambda authorizer", lambdaAuth(map[string]any{"principalId": "tenant-9"}), "lambda:tenant-9"},
		{"a Lambda authorizer's principalId that is not a string", lambdaAuth(map[string]any{"principalId": 9}), ""},
		{"a Lambda authorizer without principalId", lambdaAuth(map[string]any{"tenant": "9"}), ""},
		{"an authorizer with no identity", &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{}, ""},
	}
	for _, tt := range tests {
		got, ok := apigw.Scope(request(authorizer(tt.auth)), issuer)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("%s: Scope = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}
}

func TestJWTScopeWithoutAConfiguredIssuer(t *testing.T) {
	if got := apigw.JWTScope(issuer, "user-1", ""); got != `jwt@"`+issuer+`":user-1` {
		t.Errorf("JWTScope with no configured issuer = %q; want qualified by the token's issuer", got)
	}
	if got, _ := apigw.Scope(request(authorizer(jwt(map[string]string{"sub": "user-1", "iss": issuer}))), ""); got != `jwt@"`+issuer+`":user-1` {
		t.Errorf("Scope with no configured issuer = %q; want qualified by the token's issuer", got)
	}
}

func TestNormalizePrincipal(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123", "arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"arn:aws-cn:sts::111122223333:assumed-role/Publisher/s", "arn:aws-cn:sts::111122223333:assumed-role/Publisher"},
		{"arn:aws:sts::111122223333:assumed-role/Publisher", "arn:aws:sts::111122223333:assumed-role/Publisher"},
		{"arn:aws:iam::111122223333:role/Publisher", "arn:aws:iam::111122223333:role/Publisher"},
		{"arn:aws:iam::111122223333:user/ci", "arn:aws:iam::111122223333:user/ci"},
		{"not-an-arn:assumed-role/Publisher/s", "not-an-arn:assumed-role/Publisher/s"},
		{"", ""},
	} {
		if got := apigw.NormalizePrincipal(tt.in); got != tt.want {
			t.Errorf("NormalizePrincipal(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestScopedKeysOfTodaysCallers: stored keys are api:<16 hex of
// SHA-256(scope)>:<key>, and a caller whose identity did not change must
// find the records it stored before: these digests were computed by the
// release before apigw.
func TestScopedKeysOfTodaysCallers(t *testing.T) {
	for scope, want := range map[string]string{
		"jwt:tenant-a": "api:cc83083ab1c48e9c:order-7f3a9c21",
		"iam:arn:aws:sts::111122223333:assumed-role/Publisher": "api:9bb35b3a524d415e:order-7f3a9c21",
		"lambda:tenant-9": "api:f2ee4b3ade3f0fe6:order-7f3a9c21",
		"anonymous":       "api:2f183a4e64493af3:order-7f3a9c21",
	} {
		if got := apigw.ScopedKey(scope, clientKey); got != want {
			t.Errorf("ScopedKey(%q) = %q; want %q", scope, got, want)
		}
	}
}

func TestIsScopedKey(t *testing.T) {
	if k := apigw.ScopedKey("jwt:user-1", clientKey); !apigw.IsScopedKey(k) {
		t.Errorf("IsScopedKey(%q) = false; want true", k)
	}
	for _, k := range []string{"evt:order-1:notify", "wh:stripe:evt_1", "API:0123456789abcdef:k"} {
		if apigw.IsScopedKey(k) {
			t.Errorf("IsScopedKey(%q) = true; want false", k)
		}
	}
}

// keyEcho answers with the key the handler got from its context.
func keyEcho(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	key, _ := oncely.KeyFrom(ctx)
	b, _ := json.Marshal(map[string]string{"key": key})
	return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: string(b)}, nil
}

func keyOf(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	var b struct{ Key string }
	if err := json.Unmarshal([]byte(resp.Body), &b); err != nil {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	return b.Key
}

// TestCallersNeverSeeEachOthersResponses: two callers who send the same
// Idempotency-Key and body each run the handler once and get their own
// response, first and on every retry; the handler gets each one's scoped
// key.
func TestCallersNeverSeeEachOthersResponses(t *testing.T) {
	type auth = *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
	tests := []struct {
		name string
		a, b auth
	}{
		{"two JWT subjects", jwt(map[string]string{"sub": "tenant-a", "iss": issuer}), jwt(map[string]string{"sub": "tenant-b", "iss": issuer})},
		{"one subject of the configured issuer and of another", jwt(map[string]string{"sub": "u-1", "iss": issuer}), jwt(map[string]string{"sub": "u-1", "iss": "https://other.example"})},
		{"an IAM user and another", iam("arn:aws:iam::111122223333:user/ci"), iam("arn:aws:iam::111122223333:user/deploy")},
		{"two roles", iam("arn:aws:sts::111122223333:assumed-role/Publisher/s1"), iam("arn:aws:sts::111122223333:assumed-role/Reader/s1")},
		{"two Cognito identities of one pool, one role", cognito(pool, "us-east-1:a"), cognito(pool, "us-east-1:b")},
		{"a Cognito identity and its pool's role", cognito(pool, "us-east-1:a"), iam(cognitoRole)},
		{"two Lambda authorizer principals", lambdaAuth(map[string]any{"principalId": "tenant-9"}), lambdaAuth(map[string]any{"principalId": "tenant-8"})},
		{"a Lambda authorizer principal and anonymous", lambdaAuth(map[string]any{"principalId": "tenant-9"}), nil},
		{"a JWT subject and anonymous", jwt(map[string]string{"sub": "tenant-a", "iss": issuer}), nil},
		{"one name as a JWT subject and as a Lambda principal", jwt(map[string]string{"sub": "tenant-9", "iss": issuer}), lambdaAuth(map[string]any{"principalId": "tenant-9"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, keyEcho)
			reqs := []events.APIGatewayV2HTTPRequest{request(authorizer(tt.a)), request(authorizer(tt.b))}
			var keys [2]string
			for i, req := range reqs {
				resp, res := f.handle(t, req)
				keys[i] = keyOf(t, resp)
				if resp.StatusCode != 201 || resp.Headers[apigw.HeaderReplayed] != "" || res.Replayed {
					t.Errorf("caller %d: %d %v; want its own 201, not a replay", i, resp.StatusCode, resp.Headers)
				}
				if want := scopedKey(t, req, clientKey); keys[i] != want || res.Key != want {
					t.Errorf("caller %d: the handler got key %q, the result says %q; want the scoped key %q", i, keys[i], res.Key, want)
				}
			}
			if keys[0] == keys[1] {
				t.Errorf("both callers got key %q", keys[0])
			}
			for i, req := range reqs {
				resp, _ := f.handle(t, req)
				if got := keyOf(t, resp); got != keys[i] || resp.Headers[apigw.HeaderReplayed] != "true" {
					t.Errorf("caller %d's retry got %s %v; want its own response, replayed", i, resp.Body, resp.Headers)
				}
			}
			if n := f.calls.Load(); n != 2 {
				t.Errorf("handler runs %d; want 2, one a caller", n)
			}
		})
	}
}

// TestOneCallerAcrossRequestsSharesItsKeys: two sessions of one role, and
// one subject with other claims, are one caller: the second request gets
// the first's response.
func TestOneCallerAcrossRequestsSharesItsKeys(t *testing.T) {
	type auth = *events.APIGatewayV2HTTPRequestContextAuthorizerDescription
	for name, pair := range map[string][2]auth{
		"two sessions of one role":            {iam("arn:aws:sts::111122223333:assumed-role/Publisher/i-0abc123"), iam("arn:aws:sts::111122223333:assumed-role/Publisher/task-42")},
		"one subject, another scope":          {jwt(map[string]string{"sub": "u-1", "iss": issuer, "scope": "read"}), jwt(map[string]string{"sub": "u-1", "iss": issuer, "scope": "write"})},
		"one Cognito identity twice":          {cognito(pool, "us-east-1:a"), cognito(pool, "us-east-1:a")},
		"one Lambda principal, other context": {lambdaAuth(map[string]any{"principalId": "tenant-9", "n": "1"}), lambdaAuth(map[string]any{"principalId": "tenant-9", "n": "2"})},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, oncely.Options{}, apigw.Options{}, keyEcho)
			first, _ := f.handle(t, request(authorizer(pair[0])))
			second, _ := f.handle(t, request(authorizer(pair[1])))
			if second.Body != first.Body || second.Headers[apigw.HeaderReplayed] != "true" || f.calls.Load() != 1 {
				t.Errorf("second: %s %v (runs %d); want the first's %s replayed", second.Body, second.Headers, f.calls.Load(), first.Body)
			}
		})
	}
}

// TestAnotherIssuersTokenIsScopedApart: with Options.JWTIssuer set, a
// token of another issuer with the configured issuer's subject is another
// caller; the configured issuer's token keeps the unqualified scope.
func TestAnotherIssuersTokenIsScopedApart(t *testing.T) {
	const other = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Other"
	f := newFixture(t, oncely.Options{}, apigw.Options{JWTIssuer: other}, keyEcho)
	ours := request(authorizer(jwt(map[string]string{"sub": "u-1", "iss": other})))
	theirs := request(authorizer(jwt(map[string]string{"sub": "u-1", "iss": issuer})))
	a, _ := f.handle(t, ours)
	b, _ := f.handle(t, theirs)
	if keyOf(t, a) != apigw.ScopedKey("jwt:u-1", clientKey) {
		t.Errorf("the configured issuer's token got key %s; want jwt:u-1's", keyOf(t, a))
	}
	if keyOf(t, b) != apigw.ScopedKey(`jwt@"`+issuer+`":u-1`, clientKey) || b.Headers[apigw.HeaderReplayed] != "" {
		t.Errorf("another issuer's token got %s %v; want its own run under its qualified scope", b.Body, b.Headers)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("handler runs %d; want 2", n)
	}
}

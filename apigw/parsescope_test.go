package apigw_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/apigw"
)

// ParseScope reads back every scope Scope gives: an operator who names a
// caller the way the function scopes it finds that caller's keys.
func TestParseScopeIsScopesInverse(t *testing.T) {
	const issuer = "https://issuer.example"
	auth := func(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) events.APIGatewayV2HTTPRequest {
		var req events.APIGatewayV2HTTPRequest
		req.RequestContext.Authorizer = a
		return req
	}
	jwt := func(iss, sub string) events.APIGatewayV2HTTPRequest {
		return auth(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"iss": iss, "sub": sub}}})
	}
	iam := func(arn, pool, identity string) events.APIGatewayV2HTTPRequest {
		d := &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}
		d.CognitoIdentity.IdentityPoolID, d.CognitoIdentity.IdentityID = pool, identity
		return auth(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{IAM: d})
	}
	requests := map[string]events.APIGatewayV2HTTPRequest{
		"no authorizer":            {},
		"JWT of the issuer":        jwt(issuer, "user-1"),
		"JWT of another issuer":    jwt(`https://other.example/"odd":`, "user:2"),
		"IAM user":                 iam("arn:aws:iam::123456789012:user/alice", "", ""),
		"IAM assumed-role session": iam("arn:aws:sts::123456789012:assumed-role/orders/session-1", "", ""),
		"Cognito identity":         iam("arn:aws:sts::123456789012:assumed-role/pool-role/CognitoIdentityCredentials", "us-east-1:pool", "us-east-1:id-1"),
		"Lambda authorizer":        auth(&events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"principalId": "tenant-7"}}),
	}
	for name, req := range requests {
		t.Run(name, func(t *testing.T) {
			scope, ok := apigw.Scope(req, issuer)
			if !ok {
				t.Fatalf("Scope refused the request")
			}
			got, err := apigw.ParseScope(scope)
			if err != nil || got != scope {
				t.Errorf("ParseScope(%q) = %q, %v; want it back", scope, got, err)
			}
		})
	}
	// What an operator types is normalised as Scope would: a session by
	// its role.
	if got, _ := apigw.ParseScope("iam:arn:aws:sts::123456789012:assumed-role/orders/session-9"); got != "iam:arn:aws:sts::123456789012:assumed-role/orders" {
		t.Errorf("a session's scope is %q; want its role's", got)
	}
	for _, bad := range []string{"", "bob", "jwt:", "cognito:pool", "cognito:/id", `jwt@"unterminated:sub`, `jwt@"iss":`, "lambda:", "iam:"} {
		if _, err := apigw.ParseScope(bad); err == nil || !strings.Contains(err.Error(), "want anonymous") {
			t.Errorf("ParseScope(%q) = %v; want an error naming the grammar", bad, err)
		}
	}
}

func TestValidateClientKeyIsTheHeadersRule(t *testing.T) {
	for key, ok := range map[string]bool{
		"order-7f3a9c21":           true,
		"short":                    false,
		strings.Repeat("k", 100):   true,
		strings.Repeat("k", 101):   false,
		"has space in it":          false,
		"colons:are:fine:here-123": true,
	} {
		if err := apigw.ValidateClientKey(key); (err == nil) != ok {
			t.Errorf("ValidateClientKey(%q) = %v; want ok %v", key, err, ok)
		}
	}
}

package apigw

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/idem"
)

// Scope returns the caller identity that keys are scoped by, so that one
// client can never read or block another's results, and whether the
// request has one. issuer is the JWT authorizer's configured issuer.
//
// The scope is hashed into every stored key, so a caller whose identity is
// unchanged must keep its scope string across releases, or its retries
// would run again (a test replays records stored under these strings):
//
//	no authorizer (ApiAuth=NONE)          "anonymous": one key space shared by every caller
//	JWT from the configured issuer        "jwt:<sub>"
//	JWT from another issuer               "jwt@<quoted issuer>:<sub>"
//	IAM, from a Cognito identity pool     "cognito:<pool id>/<identity id>"
//	IAM, any other principal              "iam:<principal>" (an assumed role by its role, not its session)
//	a Lambda authorizer                   "lambda:<principalId>"
//
// An authorizer that names no caller (a JWT without sub, IAM without a
// principal, a Lambda authorizer without principalId) gives ok false: the
// request is refused rather than put in a shared key space.
func Scope(req events.APIGatewayV2HTTPRequest, issuer string) (scope string, ok bool) {
	a := req.RequestContext.Authorizer
	switch {
	case a == nil:
		return "anonymous", true
	case a.JWT != nil:
		sub := a.JWT.Claims["sub"]
		if sub == "" {
			return "", false
		}
		return JWTScope(a.JWT.Claims["iss"], sub, issuer), true
	case a.IAM != nil:
		// Every caller of an identity pool assumes the pool's role: the
		// role would put them all in one key space. The identity id is theirs.
		if c := a.IAM.CognitoIdentity; c.IdentityID != "" {
			return CognitoScope(c.IdentityPoolID, c.IdentityID), true
		}
		if a.IAM.UserARN == "" {
			return "", false
		}
		return "iam:" + NormalizePrincipal(a.IAM.UserARN), true
	case a.Lambda != nil:
		if p, ok := a.Lambda["principalId"].(string); ok && p != "" {
			return "lambda:" + p, true
		}
	}
	return "", false
}

// JWTScope is the scope of a token with issuer iss and subject sub, when
// the authorizer is configured with issuer configured. A token of the
// configured issuer keeps the scope it always had, "jwt:<sub>"; any other
// issuer's is qualified by it, quoted so that no issuer and subject can
// spell another pair's scope.
func JWTScope(iss, sub, configured string) string {
	if iss == configured {
		return "jwt:" + sub
	}
	return "jwt@" + strconv.Quote(iss) + ":" + sub
}

// CognitoScope is the scope of an IAM caller from a Cognito identity pool:
// its identity, not the pool's role that every such caller assumes.
func CognitoScope(pool, identity string) string {
	return "cognito:" + pool + "/" + identity
}

// NormalizePrincipal turns an assumed-role session ARN
// (arn:aws:sts::111122223333:assumed-role/Role/session) into the role's
// (arn:aws:sts::111122223333:assumed-role/Role). Other ARNs are returned as
// they are.
func NormalizePrincipal(arn string) string {
	const marker = ":assumed-role/"
	i := strings.Index(arn, marker)
	if i < 0 || !strings.HasPrefix(arn, "arn:") {
		return arn
	}
	rest := arn[i+len(marker):]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		return arn[:i+len(marker)+j]
	}
	return arn
}

// ScopedKey is the key stored, and sent downstream, for a client's key
// within its scope. The scope is hashed: principals may hold characters
// keys may not.
func ScopedKey(scope, clientKey string) string {
	sum := sha256.Sum256([]byte(scope))
	return scopedKeyPrefix + hex.EncodeToString(sum[:8]) + ":" + clientKey
}

// scopedKeyPrefix begins every key ScopedKey makes.
const scopedKeyPrefix = "api:"

// IsScopedKey reports whether key has the form ScopedKey gives: an API
// request's key (its caller retries it), not an SQS event's (its message
// is gone once acknowledged).
func IsScopedKey(key string) bool {
	return strings.HasPrefix(key, scopedKeyPrefix)
}

// ParseScope is Scope's inverse for a scope string written by hand (an
// operator naming a caller, as oncelyctl --caller does): it accepts every
// form Scope gives, in the grammar above, and returns it as Scope would
// give it for that caller (an assumed-role session by its role; a JWT
// issuer quoted as JWTScope quotes it), so that ScopedKey finds that
// caller's keys. Its error names the grammar.
func ParseScope(s string) (string, error) {
	kind, value, _ := strings.Cut(s, ":")
	switch {
	case s == "anonymous":
		return s, nil
	case strings.HasPrefix(s, `jwt@"`):
		iss, err := strconv.QuotedPrefix(s[len("jwt@"):])
		if err != nil {
			break
		}
		rest := s[len("jwt@")+len(iss):]
		issuer, _ := strconv.Unquote(iss)
		if sub, ok := strings.CutPrefix(rest, ":"); ok && sub != "" {
			return "jwt@" + strconv.Quote(issuer) + ":" + sub, nil
		}
	case value == "":
	case kind == "jwt", kind == "lambda":
		return s, nil
	case kind == "cognito":
		if pool, identity, ok := strings.Cut(value, "/"); ok && pool != "" && identity != "" {
			return CognitoScope(pool, identity), nil
		}
	case kind == "iam":
		return "iam:" + NormalizePrincipal(value), nil
	}
	return "", fmt.Errorf(`scope %q: want anonymous, jwt:SUB, jwt@"ISSUER":SUB, iam:ARN, cognito:POOL/IDENTITY or lambda:PRINCIPAL`, s)
}

// ValidateClientKey reports whether key is a valid Idempotency-Key header
// value (without surrounding quotes): 8 to 100 characters, of those a key
// may hold. Its error names the rule.
func ValidateClientKey(key string) error {
	if len(key) < 8 || len(key) > maxClientKey {
		return fmt.Errorf("the %s header must be 8 to %d characters, got %d", HeaderKey, maxClientKey, len(key))
	}
	if err := idem.ValidateKey(key); err != nil {
		return fmt.Errorf("the %s header is invalid: %s", HeaderKey, err.(*idem.Error).Message)
	}
	return nil
}

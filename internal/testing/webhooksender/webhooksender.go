// Package webhooksender signs webhook deliveries the way their senders do,
// for tests and the demo of the receiving route (POST /webhooks/{source}):
// a Standard Webhooks sender, Stripe and GitHub. Each signer follows its
// sender's documentation, and is checked against an independent party
// before a test trusts it: GitHub's published test vector (this package's
// test), PyPI's stripe library (internal/e2e, which also signs Standard
// Webhooks deliveries with PyPI's standardwebhooks).
//
// It is test support; no shipped command links it.
package webhooksender

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/oncely/oncely/internal/webhooksig"
)

// StandardWebhooks returns the three headers of a Standard Webhooks
// delivery of body with id, signed at ts with each key (raw bytes: the
// secret whsec_<base64> decoded).
func StandardWebhooks(id string, ts time.Time, body []byte, keys ...[]byte) map[string]string {
	return webhooksig.Headers(id, ts, body, keys)
}

// Stripe returns a Stripe-Signature header value for body signed at ts with
// each secret (whsec_…, used as Stripe uses it: its text is the HMAC key):
// t=<unix>,v1=<hex>[,v1=<hex>…].
func Stripe(ts time.Time, body []byte, secrets ...string) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	out := "t=" + t
	for _, s := range secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte(t + "."))
		m.Write(body)
		out += ",v1=" + hex.EncodeToString(m.Sum(nil))
	}
	return out
}

// GitHubTestVector is the example GitHub's "Validating webhook
// deliveries" page gives: with this secret, this payload has this
// X-Hub-Signature-256. A test checks GitHub against it before trusting it.
var GitHubTestVector = struct{ Secret, Payload, Signature string }{
	Secret:    "It's a Secret to Everybody",
	Payload:   "Hello, World!",
	Signature: "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
}

// GitHub returns an X-Hub-Signature-256 header value for body, as GitHub's
// documentation describes it: sha256=<hex HMAC-SHA256 of the body, keyed by
// the webhook's secret>.
func GitHub(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Alphanumeric is n random characters of [A-Za-z0-9], as CloudFormation's
// GenerateSecretString makes a secret without punctuation (the template's
// signing secret), and as good a secret as any for a test's senders.
func Alphanumeric(n int) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}

package inbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/oncely/oncely/internal/idem"
)

// GitHub: X-Hub-Signature-256 "sha256=<hex HMAC-SHA256 of the body>";
// no timestamp. The delivery id is X-GitHub-Delivery, which the
// signature does not cover, and which is the event's, not the delivery's
// (every hook and App receiving one event gets the same id, each with its
// own body): so a delivery is keyed by its body (BodyKey), and a captured
// one replayed under any id is the same key.
const GitHub Scheme = "github"

// The headers GitHub's scheme reads.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	headerGitHubSHA1      = "X-Hub-Signature"
)

// minGitHubSecret is our floor for GitHub's free-form secrets.
const minGitHubSecret = 16

var githubScheme = &scheme{
	name:         GitHub,
	decodeSecret: decodeGitHubSecret,
	verify:       verifyGitHub,
	signsTime:    false, // GitHub signs the body only
	idFrom:       HeaderGitHubDelivery,
	fingerprint:  wholeBody,
	keyedByBody:  true, // the id is not signed
}

func decodeGitHubSecret(secret string) ([]byte, error) {
	if len(secret) < minGitHubSecret {
		return nil, fmt.Errorf("a GitHub webhook secret must be at least %d characters; this one is %d", minGitHubSecret, len(secret))
	}
	return []byte(secret), nil
}

// verifyGitHub checks X-Hub-Signature-256 and returns X-GitHub-Delivery,
// which the signature does not cover.
func verifyGitHub(keys [][]byte, headers map[string]string, body []byte) (id, signedAt string, err error) {
	id = header(headers, HeaderGitHubDelivery)
	h := header(headers, HeaderGitHubSignature)
	if h == "" {
		msg := "missing header " + HeaderGitHubSignature
		if header(headers, headerGitHubSHA1) != "" {
			msg += " (only the SHA-1 " + headerGitHubSHA1 + " is present; set a secret on the webhook so GitHub sends both)"
		}
		return id, "", &idem.Error{Code: idem.CodeSignatureMissing, Message: msg}
	}
	v, ok := strings.CutPrefix(h, "sha256=")
	given, err := hex.DecodeString(v)
	if !ok || err != nil || len(given) != sha256.Size {
		return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderGitHubSignature + " is not sha256=<64 hex digits>"}
	}
	for _, key := range keys {
		m := hmac.New(sha256.New, key)
		m.Write(body)
		if hmac.Equal(m.Sum(nil), given) {
			return id, "", nil
		}
	}
	return id, "", mismatch(HeaderGitHubSignature, 1, len(keys))
}

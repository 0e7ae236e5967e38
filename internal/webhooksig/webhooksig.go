// Package webhooksig signs webhook deliveries the way the Standard Webhooks
// specification (standardwebhooks.com) says, so that receivers can verify
// them with the libraries they already have:
//
//	webhook-id:        the event's idempotency key (receivers de-duplicate on it)
//	webhook-timestamp: Unix seconds
//	webhook-signature: "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))
//
// with one space-separated signature per live key during a rotation. A
// secret is given to receivers as "whsec_" + base64(key). The package is
// pure: where the keys come from is the caller's concern (see secretsource).
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	// SecretPrefix marks a secret in the specification's text form.
	SecretPrefix = "whsec_"
)

// minKeyBytes is the specification's floor for a key: 24 bytes (192 bits).
const minKeyBytes = 24

// DecodeSecret returns the key bytes of a secret in its text form: base64,
// with or without the whsec_ prefix. Its error never holds the secret.
func DecodeSecret(secret string) ([]byte, error) {
	s := strings.TrimPrefix(strings.TrimSpace(secret), SecretPrefix)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("the webhook secret is not base64 (want whsec_<base64> or <base64>)")
	}
	if len(key) < minKeyBytes {
		return nil, errors.New("the webhook secret is shorter than 24 bytes once decoded")
	}
	return key, nil
}

// Headers returns the three headers for one delivery of body with id, at
// ts, signed with every key (keys[0] first). It never changes body: the
// signature covers the exact bytes sent.
func Headers(id string, ts time.Time, body []byte, keys [][]byte) map[string]string {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		sigs = append(sigs, "v1,"+Sign(k, id, stamp, body))
	}
	return map[string]string{HeaderID: id, HeaderTimestamp: stamp, HeaderSignature: strings.Join(sigs, " ")}
}

// Sign returns base64(HMAC-SHA256(key, id.timestamp.body)).
func Sign(key []byte, id, timestamp string, body []byte) string {
	return base64.StdEncoding.EncodeToString(MAC(key, id, timestamp, body))
}

// MAC returns HMAC-SHA256(key, id.timestamp.body): the bytes a v1
// signature encodes. A receiver compares them with crypto/hmac.Equal.
func MAC(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

package inbound

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/webhooksig"
)

// StandardWebhooks (standardwebhooks.com): webhook-id,
// webhook-timestamp and webhook-signature ("v1," + base64
// HMAC-SHA256 of id.timestamp.body); the secret is whsec_ + base64 of
// the key. The delivery id is webhook-id.
const StandardWebhooks Scheme = "standard-webhooks"

// minStandardKey is the Standard Webhooks specification's floor for a key
// (24 bytes).
const minStandardKey = 24

var standardWebhooksScheme = &scheme{
	name:         StandardWebhooks,
	decodeSecret: decodeStandardSecret,
	verify:       verifyStandard,
	signsTime:    true,
	claimedTime:  claimedStandardTime,
	idFrom:       webhooksig.HeaderID,
	fingerprint:  wholeBody,
}

func decodeStandardSecret(secret string) ([]byte, error) {
	s := strings.TrimPrefix(strings.TrimSpace(secret), "whsec_")
	// Senders write it with or without base64 padding; the reference
	// libraries accept both.
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, errors.New("a Standard Webhooks secret is whsec_ followed by base64; this one is not base64")
	}
	if len(key) < minStandardKey {
		return nil, fmt.Errorf("a Standard Webhooks key must be at least %d bytes; this one is %d", minStandardKey, len(key))
	}
	return key, nil
}

// verifyStandard checks a Standard Webhooks delivery and returns its id and
// timestamp.
func verifyStandard(keys [][]byte, headers map[string]string, body []byte) (id, ts string, err error) {
	id = header(headers, webhooksig.HeaderID)
	ts = header(headers, webhooksig.HeaderTimestamp)
	sig := header(headers, webhooksig.HeaderSignature)
	var missing []string
	for _, h := range [][2]string{{webhooksig.HeaderID, id}, {webhooksig.HeaderTimestamp, ts}, {webhooksig.HeaderSignature, sig}} {
		if h[1] == "" {
			missing = append(missing, h[0])
		}
	}
	if len(missing) > 0 {
		return id, ts, &idem.Error{Code: idem.CodeSignatureMissing, Message: "missing header " + strings.Join(missing, ", ")}
	}
	if !unixSeconds(ts) {
		return id, ts, &idem.Error{Code: idem.CodeSignatureMalformed, Message: webhooksig.HeaderTimestamp + " is not a whole number of Unix seconds"}
	}
	var given [][]byte
	for _, entry := range strings.Split(sig, " ") {
		if entry == "" {
			continue
		}
		version, value, ok := strings.Cut(entry, ",")
		if !ok {
			return id, ts, &idem.Error{Code: idem.CodeSignatureMalformed, Message: webhooksig.HeaderSignature + " has an entry without a version (want v1,<base64>)"}
		}
		if version != "v1" {
			continue // v1a (ed25519) and later versions: not ours to check
		}
		b, err := base64.StdEncoding.DecodeString(value)
		if err != nil {
			return id, ts, &idem.Error{Code: idem.CodeSignatureMalformed, Message: webhooksig.HeaderSignature + " has a v1 signature that is not base64"}
		}
		given = append(given, b)
	}
	if len(given) == 0 {
		return id, ts, &idem.Error{Code: idem.CodeSignatureMalformed, Message: webhooksig.HeaderSignature + " has no v1 signature (v1a, ed25519, is not supported)"}
	}
	for _, key := range keys {
		want := webhooksig.MAC(key, id, ts, body)
		for _, g := range given {
			if hmac.Equal(want, g) {
				return id, ts, nil
			}
		}
	}
	return id, ts, mismatch(webhooksig.HeaderSignature, len(given), len(keys))
}

// claimedStandardTime is the webhook-timestamp header, if it reads as Unix
// seconds.
func claimedStandardTime(headers map[string]string) (string, bool) {
	ts := header(headers, webhooksig.HeaderTimestamp)
	return ts, unixSeconds(ts)
}

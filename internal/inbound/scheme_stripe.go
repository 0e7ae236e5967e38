package inbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"

	"github.com/oncely/oncely/internal/idem"
)

// Stripe: Stripe-Signature "t=<unix>,v1=<hex HMAC-SHA256 of
// t.body>" keyed by the endpoint's whsec_… secret as it is written.
// The delivery id is the event's id in the body.
const Stripe Scheme = "stripe"

// HeaderStripeSignature is the header Stripe's scheme reads.
const HeaderStripeSignature = "Stripe-Signature"

// StripeVolatile are the members of a Stripe event that change between
// two deliveries of the same event: pending_webhooks counts the endpoints
// still waiting for it. Every other member (id, object, api_version,
// created, data, livemode, request, type, account, context) is fixed when
// the event is created: Stripe renders data once, with the event's
// api_version, and sends that snapshot on every attempt.
var StripeVolatile = []string{"pending_webhooks"}

var stripeScheme = &scheme{
	name:         Stripe,
	decodeSecret: decodeStripeSecret,
	verify:       verifyStripe,
	signsTime:    true,
	claimedTime:  claimedStripeTime,
	idFromBody:   stripeEventID,
	idFrom:       "the Stripe event's id",
	fingerprint:  stripeFingerprint,
}

func decodeStripeSecret(secret string) ([]byte, error) {
	if !strings.HasPrefix(secret, "whsec_") || len(secret) <= len("whsec_") || strings.TrimSpace(secret) != secret {
		return nil, errors.New("a Stripe signing secret starts with whsec_ (the endpoint's signing secret, not an API key), without spaces")
	}
	// Stripe keys the HMAC with the secret's text, prefix included.
	return []byte(secret), nil
}

// verifyStripe checks a Stripe-Signature header and returns the id the body
// claims and the signed timestamp.
func verifyStripe(keys [][]byte, headers map[string]string, body []byte) (id, signedAt string, err error) {
	id = claimedStripeID(body)
	h := header(headers, HeaderStripeSignature)
	if h == "" {
		return id, "", &idem.Error{Code: idem.CodeSignatureMissing, Message: "missing header " + HeaderStripeSignature}
	}
	var ts string
	var given [][]byte
	for _, item := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has an item that is not key=value (want t=<unix>,v1=<hex>)"}
		}
		switch k {
		case "t":
			if ts != "" {
				return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has two timestamps"}
			}
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has a v1 signature that is not hex"}
			}
			given = append(given, b)
		}
	}
	switch {
	case ts == "":
		return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has no t= timestamp"}
	case !unixSeconds(ts):
		return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + "'s t= is not a whole number of Unix seconds"}
	case len(given) == 0:
		return id, "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has no v1 signature"}
	}
	for _, key := range keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		want := m.Sum(nil)
		for _, g := range given {
			if hmac.Equal(want, g) {
				return id, ts, nil
			}
		}
	}
	return id, ts, mismatch(HeaderStripeSignature, len(given), len(keys))
}

// stripeEventID returns a Stripe event's id, from a body already checked
// to be JSON.
func stripeEventID(body []byte) (string, error) {
	var ev struct {
		ID *string `json:"id"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return "", &idem.Error{Code: idem.CodeInvalidPayload, Message: "a Stripe event is a JSON object with a string id"}
	}
	if ev.ID == nil || *ev.ID == "" {
		return "", &idem.Error{Code: idem.CodeKeyMissing, Message: "the Stripe event has no id"}
	}
	return *ev.ID, nil
}

// claimedStripeID is the id a Stripe body claims, for the log of a refused
// delivery; "" when it has none or is too large to look at.
func claimedStripeID(body []byte) string {
	if len(body) > 64<<10 {
		return ""
	}
	id, _ := stripeEventID(body)
	return id
}

// stripeFingerprint covers the event without StripeVolatile's top-level
// members; the whole body must still be canonical JSON.
func stripeFingerprint(body []byte) (string, error) {
	if _, err := idem.Fingerprint(body); err != nil {
		return "", err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		return "", &idem.Error{Code: idem.CodeInvalidPayload, Message: "a Stripe event is a JSON object"}
	}
	for _, name := range StripeVolatile {
		delete(members, name)
	}
	stable, _ := json.Marshal(members) // decoded JSON always marshals
	return idem.Fingerprint(stable)
}

// claimedStripeTime is the Stripe-Signature header's one t= item, if it
// reads as Unix seconds.
func claimedStripeTime(headers map[string]string) (string, bool) {
	var ts string
	for _, item := range strings.Split(header(headers, HeaderStripeSignature), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(item), "="); ok && k == "t" {
			if ts != "" {
				return "", false // two: verify calls it malformed
			}
			ts = v
		}
	}
	return ts, unixSeconds(ts)
}

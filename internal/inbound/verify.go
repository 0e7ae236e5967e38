package inbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/webhooksig"
)

// DefaultTolerance is how far a signed timestamp may be from now, either
// way: the Standard Webhooks libraries' and Stripe's 5 minutes.
const DefaultTolerance = 5 * time.Minute

// The headers the schemes read (matched in any case).
const (
	HeaderStripeSignature = "Stripe-Signature"
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	headerGitHubSHA1      = "X-Hub-Signature"
)

// Delivery is a delivery that passed Verify: ready to be queued.
type Delivery struct {
	Source string
	Scheme Scheme
	// ID is the sender's delivery id: webhook-id, the Stripe event's id,
	// X-GitHub-Delivery. When Verify fails it holds the id the request
	// claims, if any, for the log only: it is not verified.
	ID string
	// Key is wh:<source>:<id>, validated.
	Key string
	// Body is the body as signed, without surrounding whitespace.
	Body []byte
}

// Verify checks one delivery of body, with its request headers (names in
// any case), against the source's secrets, at now, allowing tolerance
// (zero means DefaultTolerance) between a signed timestamp and now.
//
// The signature is checked first, then the timestamp (so a timestamp is
// only called stale on a delivery that is otherwise authentic), then what
// the queue path needs: a JSON body and a delivery id that makes a valid
// key. Its error is an *idem.Error:
//
//	SIGNATURE_MISSING            a signed header is absent
//	SIGNATURE_MALFORMED          a signature or timestamp header cannot be read
//	SIGNATURE_MISMATCH           no signature matches any of the source's secrets
//	TIMESTAMP_OUTSIDE_TOLERANCE  authentic, but signed too long ago (or ahead)
//	INVALID_PAYLOAD              authentic, but the body is not JSON
//	KEY_MISSING                  authentic, but no delivery id
//	INVALID_KEY                  authentic, but the id cannot be part of a key
//
// Messages name headers and positions, never a secret or an expected
// signature.
func (s *Source) Verify(headers map[string]string, body []byte, now time.Time, tolerance time.Duration) (Delivery, error) {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	d := Delivery{Source: s.Name, Scheme: s.Scheme}
	var signedAt string // the signed Unix timestamp, for schemes that have one
	var err error
	switch s.Scheme {
	case StandardWebhooks:
		d.ID, signedAt, err = s.verifyStandard(headers, body)
	case Stripe:
		d.ID = claimedStripeID(body)
		signedAt, err = s.verifyStripe(headers, body)
	case GitHub:
		d.ID = header(headers, HeaderGitHubDelivery)
		err = s.verifyGitHub(headers, body)
	default:
		err = &idem.Error{Code: idem.CodeSignatureMalformed, Message: fmt.Sprintf("the source's scheme %q is not supported", s.Scheme)}
	}
	if err != nil {
		return d, err
	}
	if signedAt != "" {
		if err := checkTimestamp(signedAt, now, tolerance); err != nil {
			return d, err
		}
	}
	// Authentic from here on.
	d.Body = trimJSONSpace(body)
	if _, err := idem.Fingerprint(d.Body); err != nil {
		return d, &idem.Error{Code: idem.CodeInvalidPayload, Message: "the body is not a JSON document the queue path can fingerprint: " + err.(*idem.Error).Message}
	}
	if s.Scheme == Stripe {
		id, err := stripeEventID(d.Body)
		if err != nil {
			return d, err
		}
		d.ID = id
	}
	if d.ID == "" {
		return d, &idem.Error{Code: idem.CodeKeyMissing, Message: "the delivery has no id: " + idSource(s.Scheme) + " is missing or empty"}
	}
	if d.Key, err = Key(s.Name, d.ID); err != nil {
		return d, err
	}
	return d, nil
}

// idSource names where a scheme's delivery id comes from.
func idSource(s Scheme) string {
	switch s {
	case StandardWebhooks:
		return webhooksig.HeaderID
	case Stripe:
		return "the Stripe event's id"
	case GitHub:
		return HeaderGitHubDelivery
	}
	return "the delivery id"
}

// verifyStandard checks a Standard Webhooks delivery and returns its id and
// timestamp.
func (s *Source) verifyStandard(headers map[string]string, body []byte) (id, ts string, err error) {
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
	for _, key := range s.keys {
		want := webhooksig.MAC(key, id, ts, body)
		for _, g := range given {
			if hmac.Equal(want, g) {
				return id, ts, nil
			}
		}
	}
	return id, ts, mismatch(webhooksig.HeaderSignature, len(given), len(s.keys))
}

// verifyStripe checks a Stripe-Signature header and returns its timestamp.
func (s *Source) verifyStripe(headers map[string]string, body []byte) (string, error) {
	h := header(headers, HeaderStripeSignature)
	if h == "" {
		return "", &idem.Error{Code: idem.CodeSignatureMissing, Message: "missing header " + HeaderStripeSignature}
	}
	var ts string
	var given [][]byte
	for _, item := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has an item that is not key=value (want t=<unix>,v1=<hex>)"}
		}
		switch k {
		case "t":
			if ts != "" {
				return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has two timestamps"}
			}
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has a v1 signature that is not hex"}
			}
			given = append(given, b)
		}
	}
	switch {
	case ts == "":
		return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has no t= timestamp"}
	case !unixSeconds(ts):
		return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + "'s t= is not a whole number of Unix seconds"}
	case len(given) == 0:
		return "", &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderStripeSignature + " has no v1 signature"}
	}
	for _, key := range s.keys {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		want := m.Sum(nil)
		for _, g := range given {
			if hmac.Equal(want, g) {
				return ts, nil
			}
		}
	}
	return ts, mismatch(HeaderStripeSignature, len(given), len(s.keys))
}

// verifyGitHub checks X-Hub-Signature-256.
func (s *Source) verifyGitHub(headers map[string]string, body []byte) error {
	h := header(headers, HeaderGitHubSignature)
	if h == "" {
		msg := "missing header " + HeaderGitHubSignature
		if header(headers, headerGitHubSHA1) != "" {
			msg += " (only the SHA-1 " + headerGitHubSHA1 + " is present; set a secret on the webhook so GitHub sends both)"
		}
		return &idem.Error{Code: idem.CodeSignatureMissing, Message: msg}
	}
	v, ok := strings.CutPrefix(h, "sha256=")
	given, err := hex.DecodeString(v)
	if !ok || err != nil || len(given) != sha256.Size {
		return &idem.Error{Code: idem.CodeSignatureMalformed, Message: HeaderGitHubSignature + " is not sha256=<64 hex digits>"}
	}
	for _, key := range s.keys {
		m := hmac.New(sha256.New, key)
		m.Write(body)
		if hmac.Equal(m.Sum(nil), given) {
			return nil
		}
	}
	return mismatch(HeaderGitHubSignature, 1, len(s.keys))
}

func mismatch(h string, signatures, keys int) error {
	return &idem.Error{Code: idem.CodeSignatureMismatch, Message: fmt.Sprintf("no signature in %s matches the body with any of the source's secrets (%d signature(s), %d secret(s))", h, signatures, keys)}
}

// unixSeconds accepts 1 to 12 decimal digits without a sign or leading
// zero: what senders write, and what they sign.
func unixSeconds(s string) bool {
	if s == "" || len(s) > 12 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// checkTimestamp refuses a signed timestamp more than tolerance from now,
// either way.
func checkTimestamp(ts string, now time.Time, tolerance time.Duration) error {
	n, _ := strconv.ParseInt(ts, 10, 64) // unixSeconds checked it
	at := time.Unix(n, 0)
	switch d := now.Sub(at); {
	case d > tolerance:
		return &idem.Error{Code: idem.CodeTimestampOutsideTolerance, Message: fmt.Sprintf("the signature's timestamp is %d s before now; the tolerance is %d s (a replay, or a retry signed with its first timestamp)", int64(d/time.Second), int64(tolerance/time.Second))}
	case d < -tolerance:
		return &idem.Error{Code: idem.CodeTimestampOutsideTolerance, Message: fmt.Sprintf("the signature's timestamp is %d s after now; the tolerance is %d s (a clock far off)", int64(-d/time.Second), int64(tolerance/time.Second))}
	}
	return nil
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

// Key returns an inbound delivery's idempotency key, wh:<source>:<id>,
// validated like every key (an INVALID_KEY *idem.Error otherwise). The
// source's name holds no ':', so the id may.
func Key(source, id string) (string, error) {
	if !ValidName(source) {
		return "", &idem.Error{Code: idem.CodeInvalidKey, Message: fmt.Sprintf("the source name is not 1 to %d characters of a-z, 0-9 and '-'", MaxSourceName)}
	}
	if id == "" {
		return "", &idem.Error{Code: idem.CodeKeyMissing, Message: "the delivery id is empty"}
	}
	key := KeyPrefix + ":" + source + ":" + id
	if err := idem.ValidateKey(key); err != nil {
		return "", &idem.Error{Code: idem.CodeInvalidKey, Message: "the delivery id cannot be part of a key: " + err.(*idem.Error).Message}
	}
	return key, nil
}

// KeyPrefix begins every inbound key.
const KeyPrefix = "wh"

// header returns the value of the header name, matched in any case (HTTP
// API payload 2.0 lower-cases names; other callers may not).
func header(headers map[string]string, name string) string {
	if v, ok := headers[strings.ToLower(name)]; ok {
		return strings.TrimSpace(v)
	}
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// trimJSONSpace drops JSON whitespace around a document.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

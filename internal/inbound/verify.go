package inbound

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

// DefaultTolerance is how far a signed timestamp may be from now, either
// way: the Standard Webhooks libraries' and Stripe's 5 minutes.
const DefaultTolerance = 5 * time.Minute

// Delivery is a delivery that passed Verify: ready to be queued.
type Delivery struct {
	Source string
	Scheme Scheme
	// ID is the sender's delivery id: webhook-id, the Stripe event's id,
	// X-GitHub-Delivery. When Verify fails it holds the id the request
	// claims, if any, for the log only: it is not verified.
	ID string
	// Key is the key the queue path runs it under, validated:
	// wh:<source>:<id>, or wh:<source>:sha256:<digest> for a scheme keyed
	// by its body (GitHub, see BodyKey).
	Key string
	// Body is the body as signed, without surrounding whitespace.
	Body []byte
}

// Verify checks one delivery of body, with its request headers (names in
// any case), against the source's secrets, at now, allowing tolerance
// (zero means DefaultTolerance) between a signed timestamp and now.
//
// For a scheme that signs a time, the timestamp the request claims is
// checked first: a capture replayed past the tolerance is refused before
// its signature is computed, so the refusal never says that the signature
// was right. Then the signature (and the timestamp it signs), then what
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
	sc, ok := schemeByName(s.Scheme)
	if !ok {
		return d, &idem.Error{Code: idem.CodeSignatureMalformed, Message: fmt.Sprintf("the source's scheme %q is not supported", s.Scheme)}
	}
	if sc.signsTime {
		if ts, ok := sc.claimedTime(headers); ok {
			if err := checkTimestamp(ts, now, tolerance); err != nil {
				// The id it claims, for the log; with no key, verify
				// computes no signature.
				d.ID, _, _ = sc.verify(nil, headers, body)
				return d, err
			}
		}
	}
	var signedAt string
	var err error
	d.ID, signedAt, err = sc.verify(s.keys, headers, body)
	if err != nil {
		return d, err
	}
	if sc.signsTime {
		// The signed timestamp is the one claimed above, unless the request
		// claimed none that reads: checked again, at no cost.
		if err := checkTimestamp(signedAt, now, tolerance); err != nil {
			return d, err
		}
	}
	// Authentic from here on.
	d.Body = trimJSONSpace(body)
	digest, err := idem.Fingerprint(d.Body)
	if err != nil {
		return d, &idem.Error{Code: idem.CodeInvalidPayload, Message: "the body is not a JSON document the queue path can fingerprint: " + err.(*idem.Error).Message}
	}
	if sc.idFromBody != nil {
		id, err := sc.idFromBody(d.Body)
		if err != nil {
			return d, err
		}
		d.ID = id
	}
	if d.ID == "" {
		return d, &idem.Error{Code: idem.CodeKeyMissing, Message: "the delivery has no id: " + sc.idFrom + " is missing or empty"}
	}
	if d.Key, err = deliveryKey(sc, s.Name, d.ID, digest); err != nil {
		return d, err
	}
	return d, nil
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

// BodyDigestPrefix begins the part of a body-keyed delivery's key that
// follows the source: wh:<source>:sha256:<digest>.
const BodyDigestPrefix = "sha256:"

// deliveryKey is the key of a delivery of scheme sc from source, with
// delivery id id and fp the whole body's fingerprint (which is the
// payload fingerprint of a scheme keyed by its body, see
// scheme.keyedByBody): Key(source, id), or, for a scheme keyed by its
// body, wh:<source>:sha256:<fp>. The id must make a valid key either way.
func deliveryKey(sc *scheme, source, id, fp string) (string, error) {
	key, err := Key(source, id)
	if err != nil || !sc.keyedByBody {
		return key, err
	}
	return KeyPrefix + ":" + source + ":" + BodyDigestPrefix + fp, nil
}

// BodyKey returns the key of a GitHub delivery of body from source,
// wh:<source>:sha256:<digest>, and its fingerprint, digest: the hex
// SHA-256 of the body's canonical JSON (RFC 8785, as every fingerprint),
// whatever its delivery id. The same body pretty-printed (as GitHub's
// Recent Deliveries shows it) has the same key. At most 107 characters
// (a source has at most 32). Its error is an *idem.Error: INVALID_KEY
// for a source name that cannot be one, INVALID_PAYLOAD for a body that
// is not JSON.
func BodyKey(source string, body []byte) (key, digest string, err error) {
	if !ValidName(source) {
		return "", "", &idem.Error{Code: idem.CodeInvalidKey, Message: fmt.Sprintf("the source name is not 1 to %d characters of a-z, 0-9 and '-'", MaxSourceName)}
	}
	if digest, err = githubScheme.fingerprint(body); err != nil {
		return "", "", err
	}
	return KeyPrefix + ":" + source + ":" + BodyDigestPrefix + digest, digest, nil
}

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

package inbound

import (
	"strings"

	"github.com/oncely/oncely/internal/idem"
)

// Scheme is how a sender signs its deliveries: the name a source's entry
// in the sources secret and an envelope give it.
type Scheme string

// scheme is everything one signing scheme decides, in one value: how its
// secrets are written, how a delivery is verified, where the delivery id
// comes from, whether it signs a time, and what of the body is
// fingerprinted. Verify, ParseSources, Envelope.Request and Fingerprint
// look the scheme up by name and call these; none of them branches on a
// scheme's name. Each scheme's value is in its own file,
// scheme_<name>.go, with its name's constant and its headers.
type scheme struct {
	name Scheme

	// decodeSecret turns one secret as the sender shows it into HMAC key
	// bytes, or says why it cannot be one. Its error names no value: it
	// is prefixed with the source and the secret's position.
	decodeSecret func(secret string) ([]byte, error)

	// verify checks the delivery's signature against each of keys (in
	// constant time, crypto/hmac.Equal) and returns:
	//   - id, the delivery id the request claims, even when it is refused
	//     (for the log only: it is not verified); "" if it claims none;
	//   - signedAt, the signed Unix timestamp, when signsTime (unixSeconds
	//     has checked it);
	//   - a SIGNATURE_MISSING, SIGNATURE_MALFORMED or SIGNATURE_MISMATCH
	//     *idem.Error whose message names headers, never a secret or an
	//     expected signature.
	// Header names are matched in any case (use header).
	verify func(keys [][]byte, headers map[string]string, body []byte) (id, signedAt string, err error)

	// signsTime is the scheme's replay rule: a scheme that signs a time
	// has its timestamp checked against the tolerance. One that does not
	// (GitHub) verifies a captured delivery at any time; only the key's
	// record refuses its replay.
	signsTime bool

	// claimedTime, for a scheme that signs a time, reads the timestamp
	// the request claims before anything is verified, so that a stale
	// capture is refused before its signature is computed: the refusal
	// says nothing of whether the signature was right. ok is false when
	// the request names none that reads as Unix seconds (verify then says
	// what is missing or malformed).
	claimedTime func(headers map[string]string) (ts string, ok bool)

	// idFromBody, when set, is where the delivery id comes from once the
	// body is authentic JSON (Stripe: the event's id): it replaces the id
	// verify claimed, and Envelope.Request checks an envelope's
	// delivery_id against it. Its error is an *idem.Error (KEY_MISSING,
	// INVALID_PAYLOAD). Nil: the id verify returned is the delivery id.
	idFromBody func(body []byte) (string, error)

	// idFrom names where the delivery id comes from, in messages: "the
	// delivery has no id: <idFrom> is missing or empty".
	idFrom string

	// fingerprint is the payload fingerprint of an authentic body: what
	// the sender keeps the same on every retry of one delivery (see
	// Fingerprint). The whole body must be canonical JSON, whatever is
	// left out.
	fingerprint func(body []byte) (string, error)

	// keyedByBody is the key rule of a scheme whose signature does not
	// cover its delivery id (GitHub): its deliveries are keyed by their
	// body, wh:<source>:sha256:<digest> (see BodyKey), not by the id,
	// which whoever holds a captured delivery can change at will. Its
	// fingerprint must be wholeBody: the digest in the key is the
	// fingerprint. The id must still make a valid key, Key(source, id):
	// the queue path consults the record stored under it before the rule
	// (see package queue).
	keyedByBody bool
}

// schemes is the table of schemes, in the order Schemes lists them. The
// key is wh:<source>:<delivery-id> (see Key), but for the schemes keyed
// by their body, wh:<source>:sha256:<digest> (see BodyKey).
var schemes = []*scheme{
	standardWebhooksScheme,
	stripeScheme,
	githubScheme,
}

// Schemes lists the schemes' names, Standard Webhooks first.
var Schemes = schemeNames()

func schemeNames() []Scheme {
	names := make([]Scheme, len(schemes))
	for i, s := range schemes {
		names[i] = s.name
	}
	return names
}

// schemeByName returns the scheme called name.
func schemeByName(name Scheme) (*scheme, bool) {
	for _, s := range schemes {
		if s.name == name {
			return s, true
		}
	}
	return nil, false
}

// KeyedByBody reports whether the deliveries of the scheme named are
// keyed by their body (BodyKey) rather than their delivery id (Key):
// GitHub's, whose delivery id is not signed.
func KeyedByBody(name Scheme) bool {
	sc, ok := schemeByName(name)
	return ok && sc.keyedByBody
}

func knownScheme(name Scheme) bool {
	_, ok := schemeByName(name)
	return ok
}

// schemeList is the schemes' names for a message: "a, b, c".
func schemeList() string {
	names := make([]string, len(schemes))
	for i, s := range schemes {
		names[i] = string(s.name)
	}
	return strings.Join(names, ", ")
}

// wholeBody is the fingerprint of a scheme whose sender resends the same
// body on every retry: all of it.
func wholeBody(body []byte) (string, error) { return idem.Fingerprint(body) }

package inbound

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/idem"
)

// Marker is the envelope's first member, and EnvelopeVersion its value. A
// queue message whose body is a JSON object beginning with this member is
// an envelope; every other body is an ordinary event.
const (
	Marker          = "oncely_inbound"
	EnvelopeVersion = 1
)

// markerPrefix is how every envelope begins, byte for byte (Encode writes
// it so).
var markerPrefix = []byte(`{"` + Marker + `":`)

// Envelope carries one verified delivery on the events queue:
//
//	{"oncely_inbound":1,"source":"stripe","scheme":"stripe","delivery_id":"evt_…","body":<the sender's body>}
//
// The body is embedded as the JSON it is, not re-encoded, so the action
// gets the sender's bytes. The envelope itself is not signed: the route
// proves it in the message's ProofAttribute (Prove), and the queue path
// runs only a proved one (or, until the cutover, one queued before it).
type Envelope struct {
	Source     string          `json:"source"`
	Scheme     Scheme          `json:"scheme"`
	DeliveryID string          `json:"delivery_id"`
	Body       json.RawMessage `json:"body"`
}

// EnvelopeOf is the envelope of a verified delivery.
func EnvelopeOf(d Delivery) Envelope {
	return Envelope{Source: d.Source, Scheme: d.Scheme, DeliveryID: d.ID, Body: d.Body}
}

// Encode returns the envelope as queued. The body, already checked to be
// JSON, is written as it is, with one exception: U+FFFE and U+FFFF, which
// JSON allows in strings but an SQS message may not hold, are written as
// \ufffe and \uffff (the same JSON value, and the same fingerprint).
func (e Envelope) Encode() []byte {
	b := make([]byte, 0, len(e.Body)+len(e.Source)+len(e.DeliveryID)+96)
	b = append(b, markerPrefix...)
	b = strconv.AppendInt(b, EnvelopeVersion, 10)
	b = append(b, `,"source":`...)
	b = appendJSONString(b, e.Source)
	b = append(b, `,"scheme":`...)
	b = appendJSONString(b, string(e.Scheme))
	b = append(b, `,"delivery_id":`...)
	b = appendJSONString(b, e.DeliveryID)
	b = append(b, `,"body":`...)
	b = appendSQSSafe(b, e.Body)
	return append(b, '}')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// appendSQSSafe appends body with the two characters SQS refuses escaped.
// In valid JSON they can only stand inside strings, where an escape means
// the same.
func appendSQSSafe(b, body []byte) []byte {
	for len(body) > 0 {
		i := bytes.Index(body, []byte("\xef\xbf"))
		if i < 0 {
			return append(b, body...)
		}
		b = append(b, body[:i]...)
		r, size := utf8.DecodeRune(body[i:])
		switch r {
		case 0xFFFE:
			b = append(b, `\ufffe`...)
		case 0xFFFF:
			b = append(b, `\uffff`...)
		default:
			b = append(b, body[i:i+size]...)
		}
		body = body[i+size:]
	}
	return b
}

// IsEnvelope reports whether a queue message body is an envelope: it
// begins, after JSON whitespace, with {"oncely_inbound":. It looks at those
// bytes only, so ordinary events pay nothing for it.
func IsEnvelope(body []byte) bool {
	return bytes.HasPrefix(trimJSONSpace(body), markerPrefix)
}

// envelopeJSON is the decoded form, with the marker.
type envelopeJSON struct {
	Version *int `json:"oncely_inbound"`
	Envelope
}

// DecodeEnvelope reads a queue message body that IsEnvelope recognised.
// Every problem is an INVALID_PAYLOAD *idem.Error that names the field,
// never its value (it goes into a poison note).
func DecodeEnvelope(body []byte) (Envelope, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	var e envelopeJSON
	if err := d.Decode(&e); err != nil || d.More() {
		return Envelope{}, invalidEnvelope("it is not a JSON object with exactly oncely_inbound, source, scheme, delivery_id and body")
	}
	switch {
	case e.Version == nil || *e.Version != EnvelopeVersion:
		return Envelope{}, invalidEnvelope("its oncely_inbound is not " + strconv.Itoa(EnvelopeVersion) + " (written by another version?)")
	case !ValidName(e.Source):
		return Envelope{}, invalidEnvelope("its source is not a valid source name")
	case !knownScheme(e.Scheme):
		return Envelope{}, invalidEnvelope("its scheme is not one of " + schemeList())
	case e.DeliveryID == "":
		return Envelope{}, &idem.Error{Code: idem.CodeKeyMissing, Message: "the inbound envelope's delivery_id is empty"}
	case len(e.Body) == 0 || string(e.Body) == "null":
		return Envelope{}, invalidEnvelope("it has no body")
	}
	return e.Envelope, nil
}

func invalidEnvelope(why string) error {
	return &idem.Error{Code: idem.CodeInvalidPayload, Message: "the inbound envelope is malformed: " + why}
}

// Request returns the envelope's idempotency request: the key
// wh:<source>:<delivery-id> (for GitHub, keyed by its body,
// wh:<source>:sha256:<digest>, see BodyKey) and the fingerprint of the
// body's stable part (see Fingerprint). For Stripe, the delivery id must
// be the event's id.
func (e Envelope) Request() (idem.Request, error) {
	key, err := Key(e.Source, e.DeliveryID)
	if err != nil {
		return idem.Request{}, err
	}
	sc, known := schemeByName(e.Scheme)
	if known && sc.idFromBody != nil {
		id, err := sc.idFromBody(e.Body)
		if err != nil {
			return idem.Request{}, err
		}
		if id != e.DeliveryID {
			return idem.Request{}, invalidEnvelope("its delivery_id is not " + sc.idFrom)
		}
	}
	fp, err := Fingerprint(e.Scheme, e.Body)
	if err != nil {
		return idem.Request{}, err
	}
	if known {
		key, _ = deliveryKey(sc, e.Source, e.DeliveryID, fp) // Key accepted both
	}
	return idem.Request{Key: key, Fingerprint: fp}, nil
}

// Fingerprint is the payload fingerprint of an inbound body: what a sender
// keeps the same on every retry of one delivery, and nothing else. The
// timestamp and signature headers are never part of it (they are not in
// the envelope). Standard Webhooks and GitHub resend the same body, so it
// covers the whole body; for Stripe it covers the event without
// StripeVolatile's top-level members. The body must be canonical JSON
// (package canonjson) in full, whatever is left out. An unknown scheme's
// fingerprint covers the whole body.
func Fingerprint(name Scheme, body []byte) (string, error) {
	if sc, ok := schemeByName(name); ok {
		return sc.fingerprint(body)
	}
	return wholeBody(body)
}

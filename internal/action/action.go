// Package action is the seam where business logic plugs in. A user who forks
// the project replaces one Func; everything around it (keys, fingerprints,
// leases, retries, replay) stays the same.
package action

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/idem"
)

// Event is one decoded event, handed to the action.
type Event struct {
	// Key is the validated idempotency key. Pass it downstream (for example
	// as an Idempotency-Key header) so the downstream can de-duplicate too.
	// An inbound webhook's is wh:<source>:<delivery-id>; a GitHub
	// delivery's, wh:<source>:sha256:<digest> of its body.
	Key string
	// Body is the event JSON as received (SQS message body, HTTP request
	// body); for an inbound webhook, the sender's body as it signed it
	// (without surrounding whitespace), not the envelope that carried it.
	// Treat it as read-only.
	Body json.RawMessage
	// Source is SourceSQS, SourceHTTP, or SourceWebhook for an inbound
	// webhook.
	Source string
	// ID is the SQS message id or the API request id, for logs.
	ID string
	// Inbound is set for an inbound webhook only (Source SourceWebhook):
	// which sender delivered it, verified by the receiving route before it
	// was queued.
	Inbound *Inbound
}

// Event.Source for an SQS message and for a POST /events request.
const (
	SourceSQS  = "sqs"
	SourceHTTP = "http"
)

// SourceWebhook is Event.Source for a delivery received on POST
// /webhooks/{source}, verified, queued on the events queue and taken from
// it: an action tells it from an ordinary SQS event by this (or by
// Event.Inbound, which is set then only).
const SourceWebhook = "webhook"

// Inbound says who sent an inbound webhook.
type Inbound struct {
	Source     string // the configured source's name, as in the route
	Scheme     string // standard-webhooks, stripe or github
	DeliveryID string // the sender's delivery id (the key's last part)
}

// Result is what a successful action returns. It is stored and replayed
// byte for byte.
type Result struct {
	// Status is the HTTP status API callers get; 0 means 200.
	Status int
	// ContentType of Body; empty means application/json.
	ContentType string
	// Body is returned to API callers and kept in the record.
	Body []byte
	// Headers and Cookies are more of an API response (package apigw
	// stores a team's response headers, but its Content-Type, here): kept
	// and replayed. Nil for an action's result.
	Headers map[string]string
	Cookies []string
	// Effects, if set, are writes the store commits in the same atomic
	// operation as the record's completion, instead of the action doing
	// them (see idem.EffectStore and package ledger). They are not stored
	// as part of the result.
	Effects idem.Effects
}

// Work adapts fn to the engine for ev: the stored form of its result, and
// its effects.
func Work(fn Func, ev Event) idem.Work {
	return func(ctx context.Context) ([]byte, idem.Effects, error) {
		r, err := fn(ctx, ev)
		if err != nil {
			return nil, nil, err
		}
		return Encode(r), r.Effects, nil
	}
}

// Func is the business action: do the side effect once, return its result,
// or an error classified with idem.Transient, idem.Permanent and friends
// (an unclassified error counts as permanent).
type Func func(ctx context.Context, ev Event) (Result, error)

// envelope is the stored form of a Result, one JSON object. A body that
// is itself a JSON value is kept verbatim under "json" (one encoding: no
// escaped copy of it); other UTF-8 bodies are kept as a JSON string under
// "body" (readable in the table), anything else in base64. Strings are
// written without HTML escaping: "<" stays one byte.
//
// Records written before "json" existed hold every UTF-8 body under
// "body", HTML-escaped; Decode reads them as it always did, so their
// replays stay byte for byte.
//
// Headers and cookies (apigw's responses) come after content_type, and are
// absent when there are none: a result without them is stored exactly as
// before they existed.
type envelope struct {
	Status      int               `json:"status"`
	ContentType string            `json:"content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Cookies     []string          `json:"cookies,omitempty"`
	JSON        json.RawMessage   `json:"json,omitempty"`
	Body        *string           `json:"body,omitempty"`
	BodyBase64  *string           `json:"body_base64,omitempty"`
}

// Encode returns the stored form of r.
func Encode(r Result) []byte {
	e := envelope{Status: r.Status, ContentType: r.ContentType, Headers: r.Headers, Cookies: r.Cookies}
	if e.Status == 0 {
		e.Status = 200
	}
	switch {
	case embeddable(r.Body):
		// Kept as is. json.Marshal would compact (and HTML-escape) a
		// RawMessage, which changes the bytes: the object is written here.
		b := make([]byte, 0, len(r.Body)+48+len(e.ContentType))
		b = append(b, `{"status":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		if e.ContentType != "" {
			b = append(b, `,"content_type":`...)
			b = appendString(b, e.ContentType)
		}
		if len(e.Headers) > 0 {
			b = append(b, `,"headers":`...)
			b = append(b, marshal(e.Headers)...) // sorted by name
		}
		if len(e.Cookies) > 0 {
			b = append(b, `,"cookies":`...)
			b = append(b, marshal(e.Cookies)...)
		}
		b = append(b, `,"json":`...)
		b = append(b, r.Body...)
		return append(b, '}')
	case utf8.Valid(r.Body):
		s := string(r.Body)
		e.Body = &s
	default:
		s := base64.StdEncoding.EncodeToString(r.Body)
		e.BodyBase64 = &s
	}
	return marshal(e)
}

// embeddable reports whether body can be stored verbatim under "json":
// one JSON value, in UTF-8 (the envelope stays text), without surrounding
// whitespace (which a JSON decoder would not hand back).
func embeddable(body []byte) bool {
	if len(body) == 0 || isSpace(body[0]) || isSpace(body[len(body)-1]) {
		return false
	}
	return utf8.Valid(body) && json.Valid(body)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// marshal encodes v as JSON without HTML escaping and without the
// encoder's trailing newline.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings, ints and raw JSON that json.Valid accepted always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

func appendString(b []byte, s string) []byte {
	return append(b, marshal(s)...)
}

// Decode reads a stored Result, in today's form or in the form records had
// before "json" existed.
func Decode(b []byte) (Result, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return Result{}, fmt.Errorf("stored result is not a result envelope: %w", err)
	}
	r := Result{Status: e.Status, ContentType: e.ContentType, Headers: e.Headers, Cookies: e.Cookies}
	switch {
	case e.JSON != nil:
		r.Body = []byte(e.JSON) // Unmarshal copies the value's bytes verbatim
	case e.Body != nil:
		r.Body = []byte(*e.Body)
	case e.BodyBase64 != nil:
		body, err := base64.StdEncoding.DecodeString(*e.BodyBase64)
		if err != nil {
			return Result{}, fmt.Errorf("stored result body: %w", err)
		}
		r.Body = body
	default:
		r.Body = []byte{}
	}
	return r, nil
}

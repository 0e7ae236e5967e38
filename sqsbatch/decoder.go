package sqsbatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/keyexpr"
)

// Decoder turns one message into the request the engine runs it under (its
// key and its payload's fingerprint, see oncely.NewRequest) and the event
// the function gets. An error refuses the message for good: it is
// acknowledged with a poison note, whose code is the error's when it is an
// *oncely.Error and INVALID_PAYLOAD otherwise, and whose detail is the
// error's text: it must never quote the body.
//
// The key must come from the event's identity, which every copy of the
// event carries (an order id, an event id), never from the delivery.
type Decoder[E any] func(m events.SQSMessage) (oncely.Request, E, error)

// JSON decodes each body, a JSON document, into an E, keys it with key and
// fingerprints the whole body: a copy of the event with other content under
// the same key is refused with KEY_REUSED. A body that is not an E's JSON
// is refused with INVALID_PAYLOAD, naming the member and the types, never
// the values; an error from key is refused with INVALID_KEY and its text
// (which must not quote the body).
func JSON[E any](key func(E) (string, error)) Decoder[E] {
	if key == nil {
		panic("sqsbatch.JSON: a key function is required")
	}
	return func(m events.SQSMessage) (oncely.Request, E, error) {
		var ev E
		body := bodyBytes(m.Body) // json.Unmarshal and NewRequest only read it
		if err := json.Unmarshal(body, &ev); err != nil {
			return oncely.Request{}, ev, &oncely.Error{Code: oncely.CodeInvalidPayload, Message: decodeError(err, ev), Err: err}
		}
		k, err := key(ev)
		if err != nil {
			why := err.Error()
			if e, ok := errors.AsType[*oncely.Error](err); ok {
				why = e.Message // its code is said once, by the note's own
			}
			return oncely.Request{}, ev, &oncely.Error{Code: oncely.CodeInvalidKey, Message: "the key function refused the event: " + why, Err: err}
		}
		req, err := oncely.NewRequest(k, body)
		return req, ev, err
	}
}

// decodeError describes why a body did not decode into an E, by types and
// positions only: encoding/json's own errors may quote a piece of the body.
func decodeError(err error, ev any) string {
	t := reflect.TypeOf(ev)
	name := "the event type"
	if t != nil {
		name = t.String()
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("the body is not JSON (at byte %d)", se.Offset)
	}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		where := "the body"
		if te.Field != "" {
			where = "member " + te.Field
		}
		// Value is the JSON type, but for a number that does not fit (or a
		// map key that is not one) encoding/json appends the literal from
		// the body: only the type is said.
		kind, _, _ := strings.Cut(te.Value, " ")
		return fmt.Sprintf("%s is a JSON %s; %s wants %s", where, kind, name, te.Type)
	}
	return "the body does not decode into " + name
}

// Expr keys each body, a JSON document, with x's JMESPath expressions
// (package keyexpr), and gives the function the body as it came. It is the
// decoder of a function whose key is configuration, not code; x's errors
// describe types and positions only.
func Expr(x *keyexpr.Extractor) Decoder[json.RawMessage] {
	if x == nil {
		panic("sqsbatch.Expr: an extractor is required")
	}
	return func(m events.SQSMessage) (oncely.Request, json.RawMessage, error) {
		req, err := x.Request(bodyBytes(m.Body))
		if err != nil {
			return oncely.Request{}, nil, err
		}
		return req, json.RawMessage(m.Body), nil
	}
}

// MessageID keys each message by its SQS message id (msg:<id>) and
// fingerprints its body, whatever it holds, and gives the function the
// message whole. It is weaker than a key from the event's identity: SQS
// gives every send a new id, so a producer that sends one event twice (a
// retry after a timeout, a replay from an outbox) gets it processed twice.
// It only stops SQS's own redeliveries of one send.
func MessageID() Decoder[events.SQSMessage] {
	return func(m events.SQSMessage) (oncely.Request, events.SQSMessage, error) {
		k, err := oncely.Key("msg", m.MessageId)
		if err != nil {
			return oncely.Request{}, m, err
		}
		payload, _ := json.Marshal(m.Body) // a string always encodes
		req, err := oncely.NewRequest(k, payload)
		return req, m, err
	}
}

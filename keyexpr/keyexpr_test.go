package keyexpr_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/canonjson"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/keyexpr"
)

func code(err error) idem.Code {
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestRequest(t *testing.T) {
	def, err := keyexpr.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body string
		key        string
		code       idem.Code
		detail     string // in the message
	}{
		{"the default key", `{"id":"release-42","action":"notify"}`, "evt:release-42:notify", "", ""},
		{"an id with the separator keeps its key", `{"id":"urn:uuid:6e8b","action":"notify"}`, "evt:urn:uuid:6e8b:notify", "", ""},
		{"an action with the separator is refused", `{"id":"a1-col","action":"x:notify"}`, "", idem.CodeInvalidAction, "key part action"},
		{"missing id", `{"action":"notify"}`, "", idem.CodeKeyMissing, "key part id is missing"},
		{"empty id", `{"id":"","action":"notify"}`, "", idem.CodeKeyMissing, "key part id is empty"},
		{"numeric id", `{"id":42,"action":"notify"}`, "", idem.CodeKeyMissing, "key part id is a number"},
		{"object id", `{"id":{"card":"4111111111111111"},"action":"notify"}`, "", idem.CodeKeyMissing, "key part id is an object"},
		{"array action", `{"id":"a","action":["x"]}`, "", idem.CodeKeyMissing, "key part action is an array"},
		{"body is an array", `[1,2]`, "", idem.CodeKeyMissing, ""},
		{"not JSON", `{"id":`, "", idem.CodeNotJSON, "ends early"},
		{"syntax error", `{"id" "x"}`, "", idem.CodeNotJSON, "syntax error at byte"},
		{"trailing data", `{"id":"a","action":"b"} {}`, "", idem.CodeNotJSON, "data after the first value"},
		{"empty body", ``, "", idem.CodeNotJSON, "empty"},
		{"duplicate member names", `{"id":"abc-123","action":"notify","action":"notify"}`, "", idem.CodeInvalidPayload, "duplicate"},
		{"invalid key characters", `{"id":"has space","action":"notify"}`, "", idem.CodeInvalidKey, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := def.Request([]byte(tt.body))
			if req.Key != tt.key || code(err) != tt.code {
				t.Fatalf("Request(%s) = %q, %v; want %q, code %q", tt.body, req.Key, err, tt.key, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("message %q does not say %q", err, tt.detail)
			}
			if err == nil && len(req.Fingerprint) != 64 {
				t.Errorf("fingerprint %q; want 64 hex digits", req.Fingerprint)
			}
		})
	}
}

// Messages describe types and places, never the body's values: they end up
// in poison notes.
func TestMessagesNeverQuoteTheBody(t *testing.T) {
	secret := "4111111111111111"
	bodies := []string{
		`{"id":{"card":"` + secret + `"},"action":"notify"}`,
		`{"id":["` + secret + `"],"action":"notify"}`,
		`{"id":"a","action":{"n":"` + secret + `"}}`,
		`{"id":"a","action":"notify","` + secret + `":1,"` + secret + `":2}`,
		`{"id":"` + secret + ` x","action":"notify"}`,
		`{"` + secret + `"`,
	}
	for _, expr := range []string{"", "join(':', ['evt', id, action])", "id.card"} {
		x, err := keyexpr.New(expr, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bodies {
			if _, err := x.Request([]byte(b)); err != nil && strings.Contains(err.Error(), secret[:6]) {
				t.Errorf("expression %q, body %s: error %v quotes the body", expr, b, err)
			}
		}
	}
}

func TestCustomExpressions(t *testing.T) {
	tests := []struct {
		key, payload, body string
		want               string
		code               idem.Code
	}{
		// A string expression is the operator's own key, used as it is.
		{"join(':', ['evt', id, action])", "", `{"id":"a","action":"x:notify"}`, "evt:a:x:notify", ""},
		{"join(':', ['evt', id, action])", "", `{"id":"","action":"notify"}`, "", idem.CodeKeyMissing},
		{"['evt', to_string(id), 'ship']", "", `{"id":12345678901234567890}`, "evt:12345678901234567890:ship", ""},
		{"detail.id", "", `{"detail":{"id":7}}`, "", idem.CodeKeyMissing},
	}
	for _, tt := range tests {
		x, err := keyexpr.New(tt.key, tt.payload)
		if err != nil {
			t.Fatalf("New(%q): %v", tt.key, err)
		}
		req, err := x.Request([]byte(tt.body))
		if req.Key != tt.want || code(err) != tt.code {
			t.Errorf("%s on %s = %q, %v; want %q, code %q", tt.key, tt.body, req.Key, err, tt.want, tt.code)
		}
	}
}

func TestPayloadExpression(t *testing.T) {
	x, err := keyexpr.New("['evt', detail.id, 'ship']", "detail")
	if err != nil {
		t.Fatal(err)
	}
	a, err1 := x.Request([]byte(`{"time":"10:00","detail":{"id":"o-1","n":1}}`))
	b, err2 := x.Request([]byte(`{"time":"11:00","detail":{"n":1,"id":"o-1"}}`))
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("envelope changes changed the request: %+v %v / %+v %v", a, err1, b, err2)
	}
	// The whole body must still be canonical JSON.
	if _, err := x.Request([]byte(`{"detail":{"id":"o-1"},"time":1,"time":2}`)); code(err) != idem.CodeInvalidPayload {
		t.Errorf("duplicate names outside the payload: %v; want INVALID_PAYLOAD", err)
	}
}

func TestNewNamesTheBadExpression(t *testing.T) {
	if _, err := keyexpr.New("join(", ""); err == nil || !strings.Contains(err.Error(), "key expression") {
		t.Errorf("bad key expression: %v", err)
	}
	if _, err := keyexpr.New("", "[["); err == nil || !strings.Contains(err.Error(), "payload expression") {
		t.Errorf("bad payload expression: %v", err)
	}
	// A literal with the separator would refuse every event at run time:
	// refuse the expression at init instead.
	if _, err := keyexpr.New("['evt:v2', id, action]", ""); err == nil || !strings.Contains(err.Error(), `"evt:v2"`) {
		t.Errorf("a literal part with ':': %v; want an error naming it", err)
	}
}

// TestTooDeepIsInvalidPayloadBeforeAnythingElse: a body nested deeper than
// canonjson.MaxDepth is INVALID_PAYLOAD whatever else is wrong with it, and
// is refused before it is decoded: past encoding/json's own limit (10,000)
// the decoder would call it NOT_JSON, and a missing key KEY_MISSING.
func TestTooDeepIsInvalidPayloadBeforeAnythingElse(t *testing.T) {
	nested := func(levels int) string {
		return strings.Repeat("[", levels) + strings.Repeat("]", levels)
	}
	for _, payloadExpr := range []string{"", "detail"} {
		x, err := keyexpr.New("", payloadExpr)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{
			`{"id":"a1","action":"notify","x":` + nested(canonjson.MaxDepth) + "}", // 1,001 levels with the event's own
			`{"x":` + nested(canonjson.MaxDepth) + "}",                             // and no key
			nested(20_000), // past encoding/json's limit
		} {
			if _, err := x.Request([]byte(body)); !errors.Is(err, canonjson.ErrTooDeep) || code(err) != idem.CodeInvalidPayload {
				t.Errorf("payload expression %q, %.40s… (%d bytes): %v; want INVALID_PAYLOAD, nested too deep", payloadExpr, body, len(body), err)
			}
		}
		ok := `{"id":"a1","action":"notify","detail":` + nested(canonjson.MaxDepth-1) + "}"
		if _, err := x.Request([]byte(ok)); err != nil {
			t.Errorf("payload expression %q, %d levels: %v; want accepted", payloadExpr, canonjson.MaxDepth, err)
		}
	}
}

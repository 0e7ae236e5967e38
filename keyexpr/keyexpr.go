// Package keyexpr turns a JSON event body into an idempotency request with
// JMESPath expressions, for functions whose key is configuration rather
// than code: the key, from a key expression (by default
// ['evt', id, action]), and the fingerprint of the payload (the whole body,
// or the part a payload expression selects). It is what Powertools calls
// event_key_jmespath and payload_validation_jmespath, and it keeps the
// JMESPath dependency out of package oncely.
//
// A body is decoded only as far as the key expression reads it, nested at
// most 10000 deep and refused deeper than the fingerprint's depth cap
// before any decode. Every problem it reports is an *oncely.Error whose
// message describes types and positions only ("key part id is an object"),
// never the values: such messages end up in poison notes, which must not
// hold body content.
package keyexpr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	jmespath "github.com/jmespath-community/go-jmespath"
	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/canonjson"
	"github.com/oncely/oncely/internal/idem"
)

// DefaultExpression builds the key from the event's id and action, joined by
// the rule of [oncely.Key]: evt:<id>:<action>. A missing, empty or
// non-string id or action is a problem, never "null": a key made of nulls
// would make every keyless event share one record.
const DefaultExpression = "['evt', id, action]"

// Extractor holds the compiled expressions. It is safe for concurrent use.
type Extractor struct {
	keySrc  string
	key     jmespath.JMESPath
	parts   []string // a name for each part of a list expression, for messages
	plan    *plan    // what the key expression reads of a body; nil: all of it
	payload jmespath.JMESPath
	// payloadPath is the payload expression's members when it is a path
	// (detail, detail.order, @): its value's raw bytes are fingerprinted.
	payloadPath []string
	pathPayload bool
}

// New compiles the key expression (empty means DefaultExpression) and the
// optional payload expression. Its error names the expression that failed.
func New(keyExpr, payloadExpr string) (*Extractor, error) {
	if keyExpr == "" {
		keyExpr = DefaultExpression
	}
	x := &Extractor{keySrc: keyExpr}
	var err error
	if x.key, err = jmespath.Compile(keyExpr); err != nil {
		return nil, fmt.Errorf("key expression %q: %w", keyExpr, err)
	}
	x.parts = partNames(keyExpr)
	if ast, err := parsing.NewParser().Parse(keyExpr); err == nil {
		x.plan = planOf(ast)
	}
	for i, name := range x.parts {
		// A literal part is the operator's: one with the separator would
		// make every event's key fail the domain's rule at run time.
		if i != 1 && strings.HasPrefix(name, `"`) && strings.ContainsRune(name, idem.KeySeparator) {
			return nil, fmt.Errorf("key expression %q: the literal part %s contains %q; only the event id (the second part) may", keyExpr, name, idem.KeySeparator)
		}
	}
	if payloadExpr != "" {
		if x.payload, err = jmespath.Compile(payloadExpr); err != nil {
			return nil, fmt.Errorf("payload expression %q: %w", payloadExpr, err)
		}
		if ast, err := parsing.NewParser().Parse(payloadExpr); err == nil {
			x.payloadPath, x.pathPayload = pathOf(ast)
		}
	}
	return x, nil
}

// partNames names the elements of a multi-select list expression ['evt',
// id, action]: a field by its name, a literal by its value (it is the
// operator's, not the body's), anything else by its position.
func partNames(expr string) []string {
	ast, err := parsing.NewParser().Parse(expr)
	if err != nil || ast.NodeType != parsing.ASTMultiSelectList {
		return nil
	}
	names := make([]string, len(ast.Children))
	for i, c := range ast.Children {
		switch {
		case c.NodeType == parsing.ASTField:
			names[i] = fmt.Sprint(c.Value)
		case c.NodeType == parsing.ASTLiteral:
			names[i] = fmt.Sprintf("%q", fmt.Sprint(c.Value))
		default:
			names[i] = fmt.Sprintf("#%d", i+1)
		}
	}
	return names
}

// Request returns the request for body: its key and the fingerprint of
// its payload. The body is decoded for the key expression by plan (only
// the values it reads are built; see decode.go), and in full only for a
// payload expression, once the key and the fingerprint are good; the
// fingerprint reads the raw bytes (a decoded map would forgive duplicate
// member names, which canonical JSON refuses). A body nested deeper than
// canonjson.MaxDepth is refused before it is decoded (INVALID_PAYLOAD); for
// every other body the order of the checks decides the code: NOT_JSON, then
// the key's codes, then INVALID_PAYLOAD.
func (x *Extractor) Request(body []byte) (oncely.Request, error) {
	r, err := x.request(body)
	return oncely.Request(r), err
}

// request is Request in the domain's type (the product's adapter calls it
// through Request; the planned decode's tests compare it with an oracle).
func (x *Extractor) request(body []byte) (idem.Request, error) {
	// The whole body must be canonical JSON even when only a part is
	// fingerprinted: the decoder forgives duplicate names and invalid
	// text, which would let two different bodies collide.
	fp, fpErr := idem.Fingerprint(body)
	if errors.Is(fpErr, canonjson.ErrTooDeep) {
		return idem.Request{}, fpErr
	}
	var doc any
	var err error
	if x.plan != nil {
		doc, err = decodePlanned(body, x.plan, fpErr == nil)
	} else {
		doc, err = decodeFull(body)
	}
	if err != nil {
		return idem.Request{}, err
	}
	key, err := x.keyOf(doc)
	if err != nil {
		return idem.Request{}, err
	}
	if err := idem.ValidateKey(key); err != nil {
		return idem.Request{}, err
	}
	if fpErr != nil {
		return idem.Request{}, fpErr
	}
	if x.pathPayload {
		// The body is canonical JSON (fpErr is nil): no duplicate names, no
		// invalid text, so the raw bytes of the value the path selects
		// fingerprint as its decoded and re-encoded form would, and a
		// missing value is null, as JMESPath gives it.
		if raw, ok := rawAt(body, x.payloadPath); ok {
			if fp, err = idem.Fingerprint(raw); err != nil {
				return idem.Request{}, err
			}
			return idem.Request{Key: key, Fingerprint: fp}, nil
		}
	}
	if x.payload != nil {
		if x.plan != nil {
			// The planned decode accepted the body, so decodeFull does.
			if doc, err = decodeFull(body); err != nil {
				return idem.Request{}, err
			}
		}
		sel, err := x.payload.Search(doc)
		if err != nil {
			return idem.Request{}, &idem.Error{Code: idem.CodeInvalidPayload, Message: "the payload expression could not be evaluated on this body"}
		}
		payload, _ := json.Marshal(sel) // values decoded from JSON always marshal
		if fp, err = idem.Fingerprint(payload); err != nil {
			return idem.Request{}, err
		}
	}
	return idem.Request{Key: key, Fingerprint: fp}, nil
}

func (x *Extractor) keyOf(doc any) (string, error) {
	v, err := x.key.Search(doc)
	if err != nil {
		// The library's message prints the offending values: never use it.
		return "", &idem.Error{Code: idem.CodeKeyMissing, Message: fmt.Sprintf("the key expression %q could not be evaluated on this body%s", x.keySrc, x.hint(doc))}
	}
	switch v := v.(type) {
	case string:
		if v == "" || emptyPart(v) {
			// A field that was present but empty ("id": "") must not yield a
			// key that every such event shares.
			return "", &idem.Error{Code: idem.CodeKeyMissing, Message: fmt.Sprintf("the key expression %q gave a key with an empty part", x.keySrc)}
		}
		return v, nil
	case []any:
		parts := make([]string, len(v))
		for i, p := range v {
			s, ok := p.(string)
			if !ok {
				return "", &idem.Error{Code: idem.CodeKeyMissing, Message: fmt.Sprintf("key part %s %s; want a string", x.partName(i), describe(p))}
			}
			parts[i] = s
		}
		key, err := idem.JoinKey(parts...)
		if err != nil {
			var e *idem.Error
			if errors.As(err, &e) {
				return "", &idem.Error{Code: e.Code, Message: x.renamed(e.Message)}
			}
			return "", err
		}
		return key, nil
	default:
		return "", &idem.Error{Code: idem.CodeKeyMissing, Message: fmt.Sprintf("the key expression %q gave %s; want a string or a list of strings", x.keySrc, describe(v))}
	}
}

// hint names the types of the parts of a list expression when evaluation
// failed, so "id is an object" reaches the operator without the object.
func (x *Extractor) hint(doc any) string {
	m, ok := doc.(map[string]any)
	if !ok {
		return ": the body is " + describe(doc)
	}
	var bad []string
	for _, name := range x.parts {
		if strings.HasPrefix(name, "#") || strings.HasPrefix(name, `"`) {
			continue
		}
		if v, ok := m[name]; !ok || v == nil {
			bad = append(bad, name+" is missing")
		} else if _, ok := v.(string); !ok {
			bad = append(bad, name+" "+describe(v))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return ": " + strings.Join(bad, ", ")
}

// partName is "id" for the second part of ['evt', id, action], or "#2".
func (x *Extractor) partName(i int) string {
	if i < len(x.parts) {
		return x.parts[i]
	}
	return fmt.Sprintf("#%d", i+1)
}

// renamed replaces JoinKey's "part N" with the part's name.
func (x *Extractor) renamed(msg string) string {
	for i := range x.parts {
		msg = strings.ReplaceAll(msg, fmt.Sprintf("part #%d ", i+1), "part "+x.parts[i]+" ")
	}
	return msg
}

// describe names a decoded JSON value's type, never its content.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "is missing or null"
	case string:
		return "is a string"
	case json.Number, float64:
		return "is a number"
	case bool:
		return "is a boolean"
	case map[string]any:
		return "is an object"
	case []any:
		return "is an array"
	}
	return fmt.Sprintf("is a %T", v)
}

// emptyPart reports whether a ':'-separated key has an empty part.
func emptyPart(key string) bool {
	return strings.HasPrefix(key, ":") || strings.HasSuffix(key, ":") || strings.Contains(key, "::")
}

// decodeFull parses body keeping numbers exact (json.Number), so that large ids
// survive key and payload expressions. Its error is a NOT_JSON *idem.Error
// that gives the byte offset, never the text.
func decodeFull(body []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		msg := "the body is not JSON"
		var se *json.SyntaxError
		switch {
		case len(bytes.TrimSpace(body)) == 0:
			msg = "the body is empty"
		case errors.As(err, &se):
			msg = fmt.Sprintf("the body is not JSON: syntax error at byte %d", se.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			msg = "the body is not JSON: it ends early"
		}
		return nil, &idem.Error{Code: idem.CodeNotJSON, Message: msg}
	}
	if d.More() {
		return nil, &idem.Error{Code: idem.CodeNotJSON, Message: fmt.Sprintf("the body is not JSON: data after the first value, at byte %d", d.InputOffset())}
	}
	return v, nil
}

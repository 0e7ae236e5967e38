// Package inbound receives webhooks that other services sign: it verifies a
// delivery the way its sender signs it (Standard Webhooks, Stripe, GitHub),
// and defines the envelope a verified delivery travels in on the events
// queue, with the key and the fingerprint the queue path gives it.
//
// It is for the two adapters that meet here: the HTTP route
// POST /webhooks/{source} (package httpapi) verifies with [Source.Verify]
// and queues [Envelope.Encode]; the queue path (package sqsbatch)
// recognises an envelope with [IsEnvelope] and builds its request with
// [Envelope.Request]. It imports no AWS package: where the sources come
// from (a Secrets Manager secret) is the wiring's concern.
//
// What it promises:
//   - every signature is compared in constant time (crypto/hmac.Equal),
//     against every secret the source lists (several during a rotation);
//   - no error, and no value it returns, holds a secret or an expected
//     signature;
//   - the key is wh:<source>:<delivery-id>, validated like every key, but
//     for a scheme whose delivery id is not signed (GitHub), which is keyed
//     by its body, wh:<source>:sha256:<digest> (see [BodyKey]); the
//     fingerprint covers only what a sender keeps the same on every retry
//     of one delivery (see [Fingerprint]).
//
// # Schemes
//
// Each scheme is one value in a table (scheme.go), as crypto/tls keeps its
// cipher suites: Verify, ParseSources, Envelope.Request and Fingerprint
// look it up by name and never branch on it. Adding a scheme is one file,
// scheme_<name>.go, plus its test vector. The file provides:
//   - the scheme's name, an exported [Scheme] constant: what the sources
//     secret and the envelope call it (stored in every envelope: never
//     renamed), and the exported names of the headers it reads;
//   - a *scheme value with each field its doc asks for: decodeSecret (the
//     secret as the sender shows it to key bytes, or why not, naming no
//     value), verify (the signature against every key in constant time,
//     the delivery id the request claims, the signed time), signsTime (its
//     replay rule), idFromBody when the id is in the body rather than a
//     header, idFrom (where the id comes from, for messages),
//     fingerprint (what of the body the sender keeps on a retry; wholeBody
//     unless the sender changes some of it), and keyedByBody when its
//     signature does not cover its delivery id;
//   - a line for that value in the schemes table, which orders [Schemes].
//
// Its test vector is an entry in scheme_test.go's vectors: a signed
// delivery, from the sender's documentation when it publishes one, that
// TestEverySchemeHasAVector verifies, tampers with and replays; a scheme
// without one fails that test. The key is wh:<source>:<delivery-id> for
// every scheme that signs its id, and wh:<source>:sha256:<digest> for one
// keyed by its body.
package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MaxSourceName bounds a source's name: the key wh:<source>:<delivery-id>
// must fit in 128 characters with the sender's id.
const MaxSourceName = 32

// ValidName reports whether name can name a source: 1 to MaxSourceName
// characters of a-z, 0-9 and '-'. It becomes part of every key.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxSourceName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Source is one configured sender: its name, its scheme and the keys its
// deliveries may be signed with.
type Source struct {
	Name   string
	Scheme Scheme
	keys   [][]byte
}

// Keys reports how many secrets the source accepts.
func (s *Source) Keys() int { return len(s.keys) }

// Sources are the configured senders, by name. A nil *Sources has none.
type Sources struct{ byName map[string]*Source }

// Lookup returns the source named name.
func (s *Sources) Lookup(name string) (*Source, bool) {
	if s == nil {
		return nil, false
	}
	src, ok := s.byName[name]
	return src, ok
}

// Names returns the sources' names, sorted.
func (s *Sources) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.byName))
}

// sourceJSON is one entry of the sources secret.
type sourceJSON struct {
	Scheme  Scheme   `json:"scheme"`
	Secrets []string `json:"secrets"`
}

// ParseSources reads the sources secret's value, a JSON object from source
// name to scheme and secrets:
//
//	{
//	  "acme":   {"scheme": "standard-webhooks", "secrets": ["whsec_…"]},
//	  "stripe": {"scheme": "stripe",            "secrets": ["whsec_…", "whsec_…"]},
//	  "github": {"scheme": "github",            "secrets": ["…"]}
//	}
//
// Several secrets are accepted at once (a rotation: the old and the new).
// A Standard Webhooks secret is whsec_ + base64 of at least 24 bytes; a
// Stripe secret is the endpoint's whsec_… signing secret as Stripe shows
// it; a GitHub secret is the text typed in the webhook's settings, at least
// 16 characters. An empty object configures no source. The error names the
// source and the secret's position, never a value.
func ParseSources(text string) (*Sources, error) {
	if err := noDuplicateNames([]byte(text)); err != nil {
		return nil, err
	}
	d := json.NewDecoder(strings.NewReader(text))
	d.DisallowUnknownFields()
	var raw map[string]sourceJSON
	if err := d.Decode(&raw); err != nil {
		return nil, describeJSONError(err)
	}
	if d.More() {
		return nil, errors.New("inbound sources: data after the JSON object")
	}
	if raw == nil {
		return nil, errors.New("inbound sources: want a JSON object of sources, got null")
	}
	out := &Sources{byName: make(map[string]*Source, len(raw))}
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		r := raw[name]
		if !ValidName(name) {
			return nil, fmt.Errorf("inbound sources: the name %q is not 1 to %d characters of a-z, 0-9 and '-' (it becomes part of every key)", name, MaxSourceName)
		}
		if !knownScheme(r.Scheme) {
			return nil, fmt.Errorf("inbound sources: %s: scheme %q is not one of %q", name, r.Scheme, Schemes)
		}
		if len(r.Secrets) == 0 {
			return nil, fmt.Errorf("inbound sources: %s: secrets is empty; want at least one", name)
		}
		src := &Source{Name: name, Scheme: r.Scheme}
		for i, secret := range r.Secrets {
			key, err := decodeSecret(r.Scheme, secret)
			if err != nil {
				return nil, fmt.Errorf("inbound sources: %s: secrets[%d]: %w", name, i, err)
			}
			src.keys = append(src.keys, key)
		}
		out.byName[name] = src
	}
	return out, nil
}

// decodeSecret turns a secret as the sender shows it into HMAC key bytes.
// Its error never holds the secret.
func decodeSecret(name Scheme, secret string) ([]byte, error) {
	sc, ok := schemeByName(name)
	if !ok {
		return nil, fmt.Errorf("unknown scheme %q", name)
	}
	return sc.decodeSecret(secret)
}

// noDuplicateNames refuses a source named twice: the decoder would keep the
// last silently. Only the top level's names are read.
func noDuplicateNames(text []byte) error {
	d := json.NewDecoder(bytes.NewReader(text))
	tok, err := d.Token()
	if err != nil || tok != json.Delim('{') {
		return nil // not an object: the decode says what it is
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		if seen[name] {
			return fmt.Errorf("inbound sources: the source %q is named twice", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// describeJSONError says where the secret's JSON is wrong without quoting
// it (the decoder's syntax errors quote a character of the input).
func describeJSONError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("inbound sources: not valid JSON (syntax error at byte %d)", se.Offset)
	case errors.As(err, &te):
		where := te.Field
		if where == "" {
			where = "the top level"
		}
		return fmt.Errorf("inbound sources: %s is a JSON %s; want %s", where, te.Value, te.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// The member's name, not a value: a typo such as "secret".
		return fmt.Errorf("inbound sources: %s; each source has only scheme and secrets", strings.TrimPrefix(err.Error(), "json: "))
	}
	return errors.New("inbound sources: not valid JSON")
}

package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/oncely/oncely/internal/canonjson"
)

// KeyPattern is the form every key must have. A key names the business
// event and action (evt:<event-id>:<action>), never the delivery attempt.
const KeyPattern = `^[A-Za-z0-9:_-]{8,128}$`

// ValidateKey returns an INVALID_KEY *Error naming what is wrong with key, or nil.
func ValidateKey(key string) error {
	if len(key) < 8 || len(key) > 128 {
		return &Error{Code: CodeInvalidKey, Message: fmt.Sprintf("key must be 8 to 128 characters, got %d", len(key))}
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ':' || c == '_' || c == '-') {
			return &Error{Code: CodeInvalidKey, Message: fmt.Sprintf("key has character %q at byte %d; allowed: A-Z a-z 0-9 : _ -", c, i)}
		}
	}
	return nil
}

// DefaultMaxEventBytes is the largest event body accepted by default, on
// every path: SQS's own message limit (1 MiB since 2026), so that the queue
// and the API accept the same events.
const DefaultMaxEventBytes = 1 << 20

// KeySeparator joins the parts of a key built by [JoinKey].
const KeySeparator = ':'

// JoinKey builds a key from its parts, evt:<event-id>:<action> for the
// default expression, and is the rule that keeps such keys unambiguous:
//   - every part must be non-empty (KEY_MISSING), or events missing a field
//     would share one key;
//   - only the second part, the event id, may contain the separator: ids
//     like urn:uuid:… keep their keys. Any other part containing it is
//     refused, the last (the action) with INVALID_ACTION, so that
//     ("a:x", "notify") and ("a", "x:notify") can never share a key.
//
// The parts are joined as they are, not encoded, so keys stay readable and
// stable across versions. The result is not yet validated with ValidateKey.
func JoinKey(parts ...string) (string, error) {
	if len(parts) == 0 {
		return "", &Error{Code: CodeKeyMissing, Message: "the key has no parts"}
	}
	for i, p := range parts {
		if p == "" {
			return "", &Error{Code: CodeKeyMissing, Message: fmt.Sprintf("key part #%d is empty", i+1)}
		}
		if i == 1 || strings.IndexByte(p, KeySeparator) < 0 {
			continue
		}
		if i == len(parts)-1 && len(parts) > 2 {
			return "", &Error{Code: CodeInvalidAction, Message: fmt.Sprintf("key part #%d (the action) contains %q; only the event id may", i+1, KeySeparator)}
		}
		return "", &Error{Code: CodeInvalidKey, Message: fmt.Sprintf("key part #%d contains %q; only the event id (part #2) may", i+1, KeySeparator)}
	}
	return strings.Join(parts, string(KeySeparator)), nil
}

// Fingerprint returns the hex SHA-256 of payload's canonical JSON (see
// package canonjson), or an INVALID_PAYLOAD *Error (one nested deeper than
// canonjson.MaxDepth wraps canonjson.ErrTooDeep). The canonical form is
// written straight into the hash: the work is linear in the payload's
// size and allocates a few times it at most, whatever its shape.
func Fingerprint(payload []byte) (string, error) {
	h := sha256.New()
	if err := canonjson.Write(h, payload); err != nil {
		return "", &Error{Code: CodeInvalidPayload, Message: err.Error(), Err: err}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Request names one event: its key and its payload fingerprint, computed
// once, before the action runs, so that an action that mutates its input
// cannot change them.
type Request struct {
	Key         string
	Fingerprint string
}

// NewRequest validates key and fingerprints payload.
func NewRequest(key string, payload []byte) (Request, error) {
	if err := ValidateKey(key); err != nil {
		return Request{}, err
	}
	fp, err := Fingerprint(payload)
	if err != nil {
		return Request{}, err
	}
	return Request{Key: key, Fingerprint: fp}, nil
}

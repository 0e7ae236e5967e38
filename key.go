package oncely

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/oncely/oncely/internal/idem"
)

// Key builds a key from parts joined with ':', for example
// Key("order", orderID, "charge") is "order:<orderID>:charge". A key names
// the business event and the action, never the attempt, so that every copy
// of the event gets the same one. Every part must be non-empty and free of
// ':' (so that two lists of parts never give one key), and the key must be
// 8 to 128 characters of A-Z a-z 0-9 : _ -. For ids outside these
// characters (an email, a URL, a long id) use [HashKey].
func Key(parts ...string) (string, error) {
	if len(parts) == 0 {
		return "", &Error{Code: CodeInvalidKey, Message: "oncely.Key: no parts"}
	}
	for i, p := range parts {
		switch {
		case p == "":
			return "", &Error{Code: CodeInvalidKey, Message: fmt.Sprintf("oncely.Key: part #%d is empty", i+1)}
		case strings.IndexByte(p, ':') >= 0:
			return "", &Error{Code: CodeInvalidKey, Message: fmt.Sprintf("oncely.Key: part #%d contains ':', which joins the parts; use oncely.HashKey for such ids", i+1)}
		}
	}
	key := strings.Join(parts, ":")
	if err := idem.ValidateKey(key); err != nil {
		return "", keyError(err)
	}
	return key, nil
}

// HashKey builds a valid key from any parts: "sha256:" and the hex SHA-256
// of the parts, each prefixed with its length (so that ("ab", "c") and
// ("a", "bc") differ). Use it for ids outside the key's characters. The
// form is a stored format: the same parts give the same key in every
// version.
func HashKey(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// keyError points an INVALID_KEY error at Key and HashKey.
func keyError(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeInvalidKey {
		return &Error{Code: CodeInvalidKey, Message: e.Message + " (build keys with oncely.Key, or oncely.HashKey for ids outside these characters)", Err: e.Err}
	}
	return err
}

package canonjson

import (
	"bytes"
	"fmt"
	"slices"
)

// errSyntax is the error for input that is not one JSON value.
var errSyntax = fmt.Errorf("%w: syntax error", ErrInvalid)

// index is the first pass. It checks that the input is exactly one JSON
// value (RFC 8259's grammar, as encoding/json.Valid checks it: whitespace
// around it, no trailing data; UTF-8 is checked before), enforces MaxDepth,
// records where the array and object values of object members start and
// end (opens, closes), and sizes the member stack for the most members
// open at once along one path from the root, and sortMembers' scratch for
// the widest object. It keeps no stack of its own
// beyond MaxDepth entries, so the writing pass can trust the input.
func (c *canon) index() error {
	src := c.src
	var (
		slot     [MaxDepth]int32 // each open container's index in opens, or -1
		counted  [MaxDepth]int32 // each open object's members so far
		inObject [MaxDepth]bool
		depth    int
		open     int // members of the open objects
		most     int
		widest   int
	)
	// close ends the innermost container at src[i].
	close := func(i int) {
		depth--
		widest = max(widest, int(counted[depth]))
		open -= int(counted[depth])
		if s := slot[depth]; s >= 0 {
			c.closes[s] = int32(i)
		}
	}
	const (
		wantValue = iota
		wantName  // an object member's name and its ':'
		afterValue
	)
	state := wantValue
	i := skipWS(src, 0)
	for {
		switch state {
		case wantValue:
			if i >= len(src) {
				return errSyntax
			}
			switch ch := src[i]; ch {
			case '{', '[':
				if depth == MaxDepth {
					return ErrTooDeep
				}
				slot[depth] = -1
				if depth > 0 && inObject[depth-1] {
					if len(c.opens) == cap(c.opens) {
						// Doubling keeps what growth allocates under the final size.
						c.opens = slices.Grow(c.opens, len(c.opens))
						c.closes = slices.Grow(c.closes, len(c.closes))
					}
					slot[depth] = int32(len(c.opens))
					c.opens = append(c.opens, int32(i))
					c.closes = append(c.closes, 0)
				}
				inObject[depth] = ch == '{'
				counted[depth] = 0
				depth++
				i = skipWS(src, i+1)
				switch {
				case i < len(src) && src[i] == ch+2: // '{'+2 is '}', '['+2 is ']'
					close(i)
					i++
					state = afterValue
				case ch == '{':
					state = wantName
				}
				continue
			case '"':
				end := scanString(src, i)
				if end < 0 {
					return errSyntax
				}
				i = end + 1
			case 't':
				if !bytes.HasPrefix(src[i:], []byte("true")) {
					return errSyntax
				}
				i += 4
			case 'f':
				if !bytes.HasPrefix(src[i:], []byte("false")) {
					return errSyntax
				}
				i += 5
			case 'n':
				if !bytes.HasPrefix(src[i:], []byte("null")) {
					return errSyntax
				}
				i += 4
			default:
				if i = scanNumber(src, i); i < 0 {
					return errSyntax
				}
			}
			state = afterValue
		case wantName:
			if i >= len(src) || src[i] != '"' {
				return errSyntax
			}
			end := scanString(src, i)
			if end < 0 {
				return errSyntax
			}
			if i = skipWS(src, end+1); i >= len(src) || src[i] != ':' {
				return errSyntax
			}
			counted[depth-1]++
			open++
			most = max(most, open)
			i = skipWS(src, i+1)
			state = wantValue
		case afterValue:
			i = skipWS(src, i)
			if depth == 0 {
				if i != len(src) {
					return errSyntax // data after the value
				}
				c.members = slices.Grow(c.members, most)
				if widest > 12 {
					c.order = make([]uint64, widest) // see sortMembers
				}
				return nil
			}
			if i >= len(src) {
				return errSyntax
			}
			switch src[i] {
			case ',':
				i = skipWS(src, i+1)
				state = wantValue
				if inObject[depth-1] {
					state = wantName
				}
			case '}', ']':
				if (src[i] == '}') != inObject[depth-1] {
					return errSyntax
				}
				close(i)
				i++
			default:
				return errSyntax
			}
		}
	}
}

func skipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// plainInString marks the bytes a string holds as they are: all but
// control characters, '"' and '\\'.
var plainInString = func() (t [256]bool) {
	for b := 0x20; b < 256; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// scanString checks the string that opens at src[open] and returns the
// offset of its closing quote, or -1.
func scanString(src []byte, open int) int {
	i := open + 1
	for {
		for i < len(src) && plainInString[src[i]] {
			i++
		}
		if i >= len(src) {
			return -1
		}
		switch src[i] {
		case '"':
			return i
		case '\\':
			if i+1 >= len(src) {
				return -1
			}
			switch src[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(src) || !isHex(src[i+2]) || !isHex(src[i+3]) || !isHex(src[i+4]) || !isHex(src[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber checks the number at src[i] (-?(0|[1-9][0-9]*)(\.[0-9]+)?
// ([eE][+-]?[0-9]+)?) and returns the offset after it, or -1.
func scanNumber(src []byte, i int) int {
	digits := func(i int) int { // one or more
		if i >= len(src) || !isDigit(src[i]) {
			return -1
		}
		for i < len(src) && isDigit(src[i]) {
			i++
		}
		return i
	}
	if i < len(src) && src[i] == '-' {
		i++
	}
	switch {
	case i < len(src) && src[i] == '0':
		i++
	default:
		if i >= len(src) || src[i] < '1' || src[i] > '9' {
			return -1
		}
		i = digits(i)
	}
	if i < len(src) && src[i] == '.' {
		if i = digits(i + 1); i < 0 {
			return -1
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i = digits(i); i < 0 {
			return -1
		}
	}
	return i
}

// Package canonjson writes the canonical form of a JSON document, following
// RFC 8785 (JSON Canonicalization Scheme) with one deliberate exception for
// integers. It exists so that a payload's fingerprint does not change with
// object key order or insignificant whitespace.
//
// Why hand-written: the RFC 8785 libraries for Go parse every number into an
// IEEE-754 double, so 12345678901234567891 and 12345678901234567892 come out
// identical, and event ids of 19 digits are common. The standard library's
// encoding/json/jsontext (behind GOEXPERIMENT=jsonv2 in Go 1.26) can keep
// integers as written, with Value.Canonicalize(CanonicalizeRawInts(false));
// its default rounds them. While it is experimental this package stays, and
// jsontext_test.go checks the two against each other (the RFC vectors, the
// fuzz seeds, and a differential fuzz target): they agree everywhere except
// a number beyond the largest double, which jsontext saturates to
// 1.7976931348623157e+308 and this package refuses, so that two different
// huge numbers never share a fingerprint, and a document nested deeper than
// MaxDepth, which this package refuses.
//
// The rules:
//   - Objects: members sorted by the UTF-16 code units of their names (RFC 8785
//     §3.2.3). Duplicate names are an error (I-JSON, RFC 7493).
//   - Strings: only '"', '\\' and control characters are escaped; \b \t \n \f
//     \r use their short forms, other controls \u00xx in lower-case hex.
//     Invalid UTF-8 and lone surrogates are errors.
//   - Numbers written as integers (no fraction, no exponent) are kept exactly
//     as written, at any size ("-0" becomes "0"). This is the exception:
//     RFC 8785 would round them through a double.
//   - Other numbers are formatted as ECMAScript's Number.prototype.toString
//     formats the nearest double, as RFC 8785 requires (1.0 → 1, 1e2 → 100,
//     1.5e300 → 1.5e+300).
//   - Arrays and objects nest at most MaxDepth deep.
//
// The work is linear in the input's size, whatever its shape, but for
// sorting each object's members (the old implementation, kept in
// oracle_impl_test.go as the test oracle, copied every member's output into
// its parent at every level: depth × size). Three passes read the input:
// utf8.Valid; index.go's, which checks the syntax as encoding/json.Valid
// does and records where each object member's array or object value ends;
// and the writing pass, which sorts each object's members by offsets into
// the input (members.go) and writes straight to its destination (a hash,
// for a fingerprint). Memory beyond the input is a fixed buffer, 16 bytes
// per object member, and up to 16 per array or object that is a member's
// value.
package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted. The work
// does not grow with depth (it is linear in the size), so the limit only
// bounds recursion and refuses shapes no event has: real events nest a few
// levels, rarely a few dozen. It errs high on purpose: a stored event deeper
// than the limit would be refused on its next delivery, and encoding/json's
// own limit is 10,000.
const MaxDepth = 1000

// MaxInput is the largest input accepted (offsets are 32-bit); bodies are
// far smaller (1 MiB by default).
const MaxInput = 1 << 30

// ErrInvalid is wrapped by every error Append and Write return for input
// that is not canonicalisable JSON.
var ErrInvalid = errors.New("invalid JSON")

// ErrTooDeep is returned for a document nested deeper than MaxDepth. It
// wraps ErrInvalid.
var ErrTooDeep = fmt.Errorf("%w: arrays and objects nested deeper than %d levels", ErrInvalid, MaxDepth)

// Append appends the canonical form of the JSON document src to dst.
func Append(dst, src []byte) ([]byte, error) {
	c := canon{src: src, out: sink{buf: dst}}
	if err := c.run(); err != nil {
		return dst, err
	}
	return c.out.buf, nil
}

// Write writes the canonical form of the JSON document src to w (a hash,
// typically) through a small buffer, without building it in memory. On an
// error w may have received part of the output.
func Write(w io.Writer, src []byte) error {
	c := canon{src: src, out: sink{w: w}}
	c.out.buf = c.out.own[:0]
	if err := c.run(); err != nil {
		return err
	}
	return c.out.flush()
}

// canon is one canonicalisation.
type canon struct {
	src []byte
	// opens and closes give, for each array or object that is the value of
	// an object member, where it starts and ends, sorted by start: they let
	// the writing pass step over a member's value in constant time.
	opens, closes []int32
	// members is a stack of the members of the objects being written.
	members []member
	// order is sortMembers' scratch, as long as the widest object.
	order  []uint64
	tie    ties                  // sortRun's state
	keyBuf []byte                // key's scratch
	cmp    func(a, b member) int // compareNames, bound once
	out    sink
	// Small documents need no allocation beyond these.
	ownOpens, ownCloses [16]int32
	ownMembers          [16]member
}

func (c *canon) run() error {
	if len(c.src) > MaxInput {
		return fmt.Errorf("%w: the document is %d bytes; at most %d are accepted", ErrInvalid, len(c.src), MaxInput)
	}
	if !utf8.Valid(c.src) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	c.opens, c.closes, c.members = c.ownOpens[:0], c.ownCloses[:0], c.ownMembers[:0]
	c.cmp = c.compareNames
	c.tie.init(c)
	if err := c.index(); err != nil {
		return err
	}
	_, err := c.value(c.skipSpace(0))
	return err
}

// stringEnd returns the offset of the quote that closes the string opened at
// src[open], or -1.
func stringEnd(src []byte, open int) int {
	for i := open + 1; ; {
		k := bytes.IndexByte(src[i:], '"')
		if k < 0 {
			return -1
		}
		q := i + k
		// The quote is escaped when an odd run of backslashes precedes it.
		n := 0
		for q-1-n > open && src[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
}

func (c *canon) skipSpace(i int) int {
	for i < len(c.src) {
		switch c.src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value writes the value at src[i] (valid JSON) and returns the offset after it.
func (c *canon) value(i int) (int, error) {
	switch c.src[i] {
	case '{':
		return c.object(i)
	case '[':
		return c.array(i)
	case '"':
		end := stringEnd(c.src, i)
		return end + 1, c.writeString(c.src[i+1 : end])
	case 't':
		c.out.str("true")
		return i + 4, nil
	case 'f':
		c.out.str("false")
		return i + 5, nil
	case 'n':
		c.out.str("null")
		return i + 4, nil
	default:
		return c.number(i)
	}
}

// skipValue returns the offset after the value at src[i], in constant time
// for an object member's array or object value (see index).
func (c *canon) skipValue(i int) int {
	switch c.src[i] {
	case '{', '[':
		k, _ := slices.BinarySearch(c.opens, int32(i))
		return int(c.closes[k]) + 1
	case '"':
		return stringEnd(c.src, i) + 1
	default:
		for i < len(c.src) {
			switch c.src[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

func (c *canon) object(i int) (int, error) {
	base := len(c.members)
	i = c.skipSpace(i + 1)
	for c.src[i] != '}' {
		end := stringEnd(c.src, i)
		c.members = append(c.members, newMember(c.src[i+1:end], i+1))
		i = c.skipSpace(c.skipSpace(end+1) + 1) // the ':'
		i = c.skipSpace(c.skipValue(i))
		if c.src[i] == ',' {
			i = c.skipSpace(i + 1)
		}
	}
	members := c.members[base:]
	if dup, ok := c.sortMembers(members); ok {
		return 0, fmt.Errorf("%w: duplicate object member name (%d bytes)", ErrInvalid, decodedLen(c.name(dup)))
	}
	c.out.byte('{')
	for k, m := range members {
		name := c.name(m)
		if k > 0 {
			c.out.byte(',')
		}
		if err := c.writeString(name); err != nil {
			return 0, err
		}
		c.out.byte(':')
		end := m.start() + len(name) // the closing quote
		if _, err := c.value(c.skipSpace(c.skipSpace(end+1) + 1)); err != nil {
			return 0, err
		}
	}
	c.out.byte('}')
	c.members = c.members[:base] // the stack discipline: nested objects used the space above
	return i + 1, nil
}

func (c *canon) array(i int) (int, error) {
	c.out.byte('[')
	i = c.skipSpace(i + 1)
	for first := true; c.src[i] != ']'; first = false {
		if !first {
			c.out.byte(',')
		}
		var err error
		if i, err = c.value(i); err != nil {
			return 0, err
		}
		i = c.skipSpace(i)
		if c.src[i] == ',' {
			i = c.skipSpace(i + 1)
		}
	}
	c.out.byte(']')
	return i + 1, nil
}

// writeString writes the string whose raw text (between the quotes, valid
// JSON) is s: decoded, then escaped canonically.
func (c *canon) writeString(s []byte) error {
	c.out.byte('"')
	for len(s) > 0 {
		k := bytes.IndexByte(s, '\\')
		if k < 0 {
			// Raw bytes in a valid string need no escape: json.Valid refused
			// control characters, and '"' and '\\' cannot appear unescaped.
			c.out.bytes(s)
			break
		}
		c.out.bytes(s[:k])
		r, n, err := escape(s[k:])
		if err != nil {
			return err
		}
		c.writeRune(r)
		s = s[k+n:]
	}
	c.out.byte('"')
	return nil
}

// escape decodes the escape sequence at the start of s, and returns its
// rune and length.
func escape(s []byte) (rune, int, error) {
	switch s[1] {
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		r := hex4(s[2:6])
		if !utf16.IsSurrogate(r) {
			return r, 6, nil
		}
		if r >= 0xDC00 || len(s) < 12 || s[6] != '\\' || s[7] != 'u' {
			return r, 6, fmt.Errorf("%w: lone surrogate \\u%04x in string", ErrInvalid, r)
		}
		if dec := utf16.DecodeRune(r, hex4(s[8:12])); dec != utf8.RuneError {
			return dec, 12, nil
		}
		return r, 6, fmt.Errorf("%w: lone surrogate \\u%04x in string", ErrInvalid, r)
	default: // '"', '\\', '/'
		return rune(s[1]), 2, nil
	}
}

// hex4 reads four hex digits (json.Valid checked them).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

const hexDigits = "0123456789abcdef"

// writeRune writes a decoded rune of a string, escaped as RFC 8785 wants.
func (c *canon) writeRune(r rune) {
	switch {
	case r == '"' || r == '\\':
		c.out.byte('\\')
		c.out.byte(byte(r))
	case r >= 0x20:
		c.out.rune(r)
	case r == '\b':
		c.out.str(`\b`)
	case r == '\t':
		c.out.str(`\t`)
	case r == '\n':
		c.out.str(`\n`)
	case r == '\f':
		c.out.str(`\f`)
	case r == '\r':
		c.out.str(`\r`)
	default:
		c.out.str(`\u00`)
		c.out.byte(hexDigits[r>>4])
		c.out.byte(hexDigits[r&0xF])
	}
}

func (c *canon) number(i int) (int, error) {
	start := i
	integer := true
	for ; i < len(c.src); i++ {
		ch := c.src[i]
		if ch == '.' || ch == 'e' || ch == 'E' {
			integer = false
		} else if !(ch == '-' || ch == '+' || (ch >= '0' && ch <= '9')) {
			break
		}
	}
	lit := c.src[start:i]
	if integer {
		if string(lit) == "-0" {
			c.out.byte('0')
		} else {
			c.out.bytes(lit)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: a number is out of range (%d digits)", ErrInvalid, len(lit))
	}
	c.writeES6Number(f)
	return i, nil
}

// writeES6Number formats f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString), which RFC 8785 §3.2.2.3 prescribes.
func (c *canon) writeES6Number(f float64) {
	if f == 0 {
		c.out.byte('0') // also -0
		return
	}
	if f < 0 {
		c.out.byte('-')
		f = -f
	}
	// Shortest round-tripping digits, as "d.ddddde±x".
	var buf, digitBuf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	at := bytes.IndexByte(e, 'e')
	digits := append(digitBuf[:0], e[0])
	if at > 1 {
		digits = append(digits, e[2:at]...)
	}
	x := 0
	for _, d := range e[at+2:] { // after the exponent's sign
		x = x*10 + int(d-'0')
	}
	if e[at+1] == '-' {
		x = -x
	}
	k := len(digits)
	n := x + 1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		c.out.bytes(digits)
		for range n - k {
			c.out.byte('0')
		}
	case 0 < n && n <= 21:
		c.out.bytes(digits[:n])
		c.out.byte('.')
		c.out.bytes(digits[n:])
	case -6 < n && n <= 0:
		c.out.str("0.")
		for range -n {
			c.out.byte('0')
		}
		c.out.bytes(digits)
	default:
		c.out.byte(digits[0])
		if k > 1 {
			c.out.byte('.')
			c.out.bytes(digits[1:])
		}
		c.out.byte('e')
		if n-1 >= 0 {
			c.out.byte('+')
		}
		c.out.bytes(strconv.AppendInt(buf[:0], int64(n-1), 10))
	}
}

// nameRune decodes the first character of a string's raw text. A lone
// surrogate decodes as itself: writeString refuses it later.
func nameRune(s []byte) (rune, int) {
	if s[0] != '\\' {
		return utf8.DecodeRune(s)
	}
	r, n, _ := escape(s)
	return r, n
}

// decodedLen is the length of a string's decoded UTF-8 text.
func decodedLen(s []byte) int {
	n := 0
	for len(s) > 0 {
		r, k := nameRune(s)
		n += utf8.RuneLen(r)
		s = s[k:]
	}
	return n
}

// sink is where the output goes: appended to buf, or through buf (own) to
// w. Nothing passed to it escapes (it is copied), so callers' small
// buffers stay on the stack.
type sink struct {
	buf []byte
	w   io.Writer
	err error
	own [512]byte
}

func (s *sink) flush() error {
	if s.err == nil && len(s.buf) > 0 {
		_, s.err = s.w.Write(s.buf)
	}
	s.buf = s.buf[:0]
	return s.err
}

// room makes room for n more bytes when writing through to w.
func (s *sink) room(n int) {
	if s.w != nil && len(s.buf)+n > cap(s.buf) {
		_ = s.flush()
	}
}

func (s *sink) byte(b byte) {
	s.room(1)
	s.buf = append(s.buf, b)
}

func (s *sink) rune(r rune) {
	s.room(utf8.UTFMax)
	s.buf = utf8.AppendRune(s.buf, r)
}

func (s *sink) bytes(b []byte) {
	if s.w == nil || len(s.buf)+len(b) <= cap(s.buf) {
		s.buf = append(s.buf, b...)
		return
	}
	for len(b) > 0 {
		s.room(1)
		n := copy(s.buf[len(s.buf):cap(s.buf)], b)
		s.buf, b = s.buf[:len(s.buf)+n], b[n:]
	}
}

func (s *sink) str(v string) {
	s.room(len(v)) // short literals only
	s.buf = append(s.buf, v...)
}

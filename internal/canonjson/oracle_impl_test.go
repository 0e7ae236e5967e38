package canonjson

// The oracle: canonjson as it was before the linear rewrite (commit
// 96398d6), kept verbatim but for its names. Its output defines the
// fingerprints already stored in every deployed table, so the rewrite must
// give the same bytes for every input this accepts (oracle_test.go's tests
// and fuzz targets diff the two). It is quadratic in depth × size: use it on
// small inputs only.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// oracleAppend appends the canonical form of the JSON document src to dst.
func oracleAppend(dst, src []byte) ([]byte, error) {
	if !utf8.Valid(src) {
		return dst, fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	if !json.Valid(src) {
		return dst, fmt.Errorf("%w: syntax error", ErrInvalid)
	}
	p := oracleParser{src: src}
	p.skipSpace()
	out, err := p.value(dst)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// oracleParser walks input that json.Valid has accepted, so it checks only what
// json.Valid does not: duplicate names, lone surrogates and number range.
type oracleParser struct {
	src []byte
	pos int
}

func (p *oracleParser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *oracleParser) value(dst []byte) ([]byte, error) {
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return dst, err
		}
		return oracleString(dst, s), nil
	case c == 't':
		p.pos += 4
		return append(dst, "true"...), nil
	case c == 'f':
		p.pos += 5
		return append(dst, "false"...), nil
	case c == 'n':
		p.pos += 4
		return append(dst, "null"...), nil
	default:
		return p.number(dst)
	}
}

type oracleMember struct {
	name  string
	value []byte
}

func (p *oracleParser) object(dst []byte) ([]byte, error) {
	p.pos++ // '{'
	p.skipSpace()
	var members []oracleMember
	for p.src[p.pos] != '}' {
		name, err := p.str()
		if err != nil {
			return dst, err
		}
		p.skipSpace()
		p.pos++ // ':'
		p.skipSpace()
		v, err := p.value(nil)
		if err != nil {
			return dst, err
		}
		members = append(members, oracleMember{name: name, value: v})
		p.skipSpace()
		if p.src[p.pos] == ',' {
			p.pos++
			p.skipSpace()
		}
	}
	p.pos++ // '}'
	slices.SortFunc(members, func(a, b oracleMember) int { return oracleCompareUTF16(a.name, b.name) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if members[i-1].name == m.name {
				return dst, fmt.Errorf("%w: duplicate object member name (%d bytes)", ErrInvalid, len(m.name))
			}
			dst = append(dst, ',')
		}
		dst = oracleString(dst, m.name)
		dst = append(dst, ':')
		dst = append(dst, m.value...)
	}
	return append(dst, '}'), nil
}

func (p *oracleParser) array(dst []byte) ([]byte, error) {
	p.pos++ // '['
	p.skipSpace()
	dst = append(dst, '[')
	first := true
	for p.src[p.pos] != ']' {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		var err error
		if dst, err = p.value(dst); err != nil {
			return dst, err
		}
		p.skipSpace()
		if p.src[p.pos] == ',' {
			p.pos++
			p.skipSpace()
		}
	}
	p.pos++ // ']'
	return append(dst, ']'), nil
}

// str decodes the JSON string at p.pos into its UTF-8 text.
func (p *oracleParser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.src[p.pos] != '"' && p.src[p.pos] != '\\' {
		p.pos++
	}
	if p.src[p.pos] == '"' {
		s := string(p.src[start:p.pos])
		p.pos++
		return s, nil
	}
	var b strings.Builder
	b.Write(p.src[start:p.pos])
	for {
		c := p.src[p.pos]
		switch c {
		case '"':
			p.pos++
			return b.String(), nil
		case '\\':
			p.pos++
			e := p.src[p.pos]
			p.pos++
			switch e {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r := p.hex4()
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || p.pos+6 > len(p.src) || p.src[p.pos] != '\\' || p.src[p.pos+1] != 'u' {
						return "", fmt.Errorf("%w: lone surrogate \\u%04x in string", ErrInvalid, r)
					}
					p.pos += 2
					r2 := p.hex4()
					dec := utf16.DecodeRune(r, r2)
					if dec == utf8.RuneError {
						return "", fmt.Errorf("%w: lone surrogate \\u%04x in string", ErrInvalid, r)
					}
					r = dec
				}
				b.WriteRune(r)
			default: // '"', '\\', '/'
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
}

func (p *oracleParser) hex4() rune {
	v, _ := strconv.ParseUint(string(p.src[p.pos:p.pos+4]), 16, 32) // json.Valid checked the digits
	p.pos += 4
	return rune(v)
}

func (p *oracleParser) number(dst []byte) ([]byte, error) {
	start := p.pos
	integer := true
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c == '.' || c == 'e' || c == 'E' {
			integer = false
		} else if !(c == '-' || c == '+' || (c >= '0' && c <= '9')) {
			break
		}
		p.pos++
	}
	lit := p.src[start:p.pos]
	if integer {
		if string(lit) == "-0" {
			return append(dst, '0'), nil
		}
		return append(dst, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return dst, fmt.Errorf("%w: a number is out of range (%d digits)", ErrInvalid, len(lit))
	}
	return oracleES6Number(dst, f), nil
}

// oracleES6Number formats f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString), which RFC 8785 §3.2.2.3 prescribes.
func oracleES6Number(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-tripping digits, as "d.ddddde±x".
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(string(e), "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k := len(digits)
	n := x + 1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, "0."...)
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

const oracleHexDigits = "0123456789abcdef"

func oracleString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= 0x20:
			dst = append(dst, c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', oracleHexDigits[c>>4], oracleHexDigits[c&0xF])
		}
	}
	return append(dst, '"')
}

// oracleCompareUTF16 orders strings by their UTF-16 code units, as RFC 8785 §3.2.3
// requires. It differs from byte order only for characters above U+FFFF
// compared with those in U+E000..U+FFFF.
func oracleCompareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return oracleCmpUnits(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

func oracleCmpUnits(ra, rb rune) int {
	ua, ub := oracleUnits(ra), oracleUnits(rb)
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return int(ua[i]) - int(ub[i])
		}
	}
	return len(ua) - len(ub)
}

func oracleUnits(r rune) []uint16 {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		return []uint16{uint16(r1), uint16(r2)}
	}
	return []uint16{uint16(r)}
}

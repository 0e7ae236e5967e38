package keyexpr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/oncely/oncely/internal/idem"
)

// The key expression reads a few values of a body; decoding the whole body
// for it (encoding/json into interface values) costs about fifty times the
// body in allocations and several times the fingerprint's CPU for a body of
// many small values. So for the expressions operators write (fields, paths,
// literals, a list of them, join of such a list) the body is decoded by
// plan: every byte is checked exactly as encoding/json's Decoder checks it
// (the same NOT_JSON bodies, the same messages), but only the values the
// expression reads are built, and of those only what the key is made of. A
// value the expression does not read is replaced by one of the same JSON
// type (an empty object or array, "" or the number 0), which is all that
// JMESPath and keyOf can observe of it on such an expression. Any other
// expression decodes the whole body, as before. TestPlannedDecodeMatchesFull
// and FuzzPlannedDecode compare the two on every corpus and on random bodies.

// reads says what the key expression reads of one value on its paths.
type reads uint8

const (
	readsNothing reads = iota // only the members below it, if it is an object
	readsPart                 // it is a part of the key: a string's text, else its type
	readsKey                  // it is the key: as a part, and an array's elements as parts
)

// plan is what the key expression reads of a document: for each value on a
// path it names, the members it goes on to and what it reads of the value.
type plan struct {
	members []member // a few: searched in order, cheaper than a map
	reads   reads
}

// member is a member a plan goes on to, by its decoded name.
type member struct {
	name string
	plan *plan
}

// member returns the plan of the member named name, or nil.
func (p *plan) member(name []byte) *plan {
	for _, m := range p.members {
		if m.name == string(name) {
			return m.plan
		}
	}
	return nil
}

// partPlan is the plan of an array's element when the array is the key.
var partPlan = &plan{reads: readsPart}

// planOf returns the plan of a key expression, or nil when the expression
// is not one of the planned forms (it then decodes the whole body).
func planOf(ast parsing.ASTNode) *plan {
	root := &plan{}
	switch ast.NodeType {
	case parsing.ASTLiteral:
		return root
	case parsing.ASTMultiSelectList:
		if !root.addList(ast, readsPart) {
			return nil
		}
		return root
	case parsing.ASTFunctionExpression:
		// join(<literal>, [<path or literal>, ...]): the form operators
		// wrote before the list. join reads the text of each part (an error
		// for a part that is not a string, whatever its value).
		if ast.Value != "join" || len(ast.Children) != 2 || ast.Children[0].NodeType != parsing.ASTLiteral ||
			ast.Children[1].NodeType != parsing.ASTMultiSelectList || !root.addList(ast.Children[1], readsPart) {
			return nil
		}
		return root
	}
	path, ok := pathOf(ast)
	if !ok {
		return nil
	}
	root.add(path, readsKey)
	return root
}

// addList adds each element of a multi-select list: a path or a literal.
func (p *plan) addList(list parsing.ASTNode, r reads) bool {
	for _, c := range list.Children {
		if c.NodeType == parsing.ASTLiteral {
			continue
		}
		path, ok := pathOf(c)
		if !ok {
			return false
		}
		p.add(path, r)
	}
	return true
}

// pathOf returns the member names of a path expression (a, a.b, @, @.a).
func pathOf(n parsing.ASTNode) ([]string, bool) {
	switch n.NodeType {
	case parsing.ASTCurrentNode, parsing.ASTIdentity:
		return nil, true
	case parsing.ASTField:
		name, ok := n.Value.(string)
		return []string{name}, ok
	case parsing.ASTSubexpression:
		if len(n.Children) != 2 {
			return nil, false
		}
		left, ok := pathOf(n.Children[0])
		if !ok {
			return nil, false
		}
		right, ok := pathOf(n.Children[1])
		return append(left, right...), ok
	}
	return nil, false
}

func (p *plan) add(path []string, r reads) {
	for _, name := range path {
		next := p.member([]byte(name))
		if next == nil {
			next = &plan{}
			p.members = append(p.members, member{name, next})
		}
		p = next
	}
	p.reads = max(p.reads, r)
}

// maxNestingDepth is encoding/json's: its Decoder refuses a value nested
// deeper (a syntax error at the bracket that goes past it).
const maxNestingDepth = 10000

// endsEarly is d.fail for the Decoder's io.ErrUnexpectedEOF.
const endsEarly = -1

// decoder checks a body as encoding/json's Decoder does and builds the
// values a plan reads.
type decoder struct {
	b     []byte
	depth int
	// fail is the offset encoding/json's SyntaxError would give (the
	// offending byte's index plus one), or endsEarly; 0 while none.
	fail int
	// valid says the body is known to be valid JSON (the fingerprint
	// accepted it, which checks encoding/json.Valid's grammar): strings are
	// then searched for their end, not checked byte by byte.
	valid   bool
	scratch []byte // a member name, unquoted
	kinds   []byte // the open containers while skipping one
}

// decodePlanned decodes body by plan, with Decode's errors (NOT_JSON, the
// same messages) for exactly the bodies Decode refuses. valid says body is
// known to be valid JSON.
func decodePlanned(body []byte, p *plan, valid bool) (any, error) {
	d := decoder{b: body, valid: valid}
	i := d.space(0)
	if i == len(body) {
		return nil, notJSON(body, 0) // io.EOF
	}
	v, end := d.value(i, p)
	if d.fail != 0 {
		return nil, notJSON(body, d.fail)
	}
	// The Decoder reads the first value, and More() then says whether
	// anything but white space, ']' or '}' follows it.
	if j := d.space(end); j < len(body) && body[j] != ']' && body[j] != '}' {
		return nil, &idem.Error{Code: idem.CodeNotJSON, Message: fmt.Sprintf("the body is not JSON: data after the first value, at byte %d", j)}
	}
	return v, nil
}

// notJSON is Decode's error for a refused body: fail is a syntax error's
// offset, endsEarly, or 0 for a body with no value.
func notJSON(body []byte, fail int) error {
	msg := "the body is not JSON"
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		msg = "the body is empty"
	case fail > 0:
		msg = fmt.Sprintf("the body is not JSON: syntax error at byte %d", fail)
	case fail == endsEarly:
		msg = "the body is not JSON: it ends early"
	}
	return &idem.Error{Code: idem.CodeNotJSON, Message: msg}
}

func (d *decoder) syntax(i int) int {
	if d.fail == 0 {
		d.fail = i + 1
	}
	return len(d.b)
}

func (d *decoder) early() int {
	if d.fail == 0 {
		d.fail = endsEarly
	}
	return len(d.b)
}

// space skips JSON white space from i.
func (d *decoder) space(i int) int {
	for i < len(d.b) {
		switch d.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value reads the value that begins at i (white space skipped) and returns
// what the plan reads of it and where it ends. After a failure (d.fail set)
// both are meaningless.
func (d *decoder) value(i int, p *plan) (any, int) {
	b := d.b
	switch c := b[i]; {
	case c == '{' || c == '[':
		if p == nil || (p.members == nil && p.reads != readsKey) || (c == '[' && p.reads != readsKey) {
			end := d.skipContainer(i)
			if p == nil {
				return nil, end // not read: nothing to build
			}
			if c == '{' {
				return map[string]any{}, end
			}
			return []any{}, end
		}
		if c == '{' {
			return d.object(i, p)
		}
		return d.keyArray(i)
	case c == '"':
		end := d.str(i)
		if d.fail != 0 || p == nil || p.reads == readsNothing {
			return "", end
		}
		if raw := b[i+1 : end-1]; plain(raw) {
			return string(raw), end
		}
		return string(appendUnquoted(nil, b[i+1:end-1])), end
	case c == '-' || '0' <= c && c <= '9':
		return json.Number("0"), d.number(i)
	case c == 't':
		return true, d.literal(i, "true")
	case c == 'f':
		return false, d.literal(i, "false")
	case c == 'n':
		return nil, d.literal(i, "null")
	}
	return nil, d.syntax(i)
}

// open enters a container at i, as the Decoder's depth limit counts them.
func (d *decoder) open(i int) bool {
	d.depth++
	if d.depth > maxNestingDepth {
		d.syntax(i)
		return false
	}
	return true
}

// object builds an object at i with the members p reads; the last of two
// members with one name wins, as in encoding/json.
func (d *decoder) object(i int, p *plan) (any, int) {
	b := d.b
	if !d.open(i) {
		return nil, len(b)
	}
	m := map[string]any{}
	i = d.space(i + 1)
	if i == len(b) {
		return nil, d.early()
	}
	if b[i] == '}' {
		d.depth--
		return m, i + 1
	}
	for {
		if i == len(b) {
			return nil, d.early()
		}
		if b[i] != '"' {
			return nil, d.syntax(i)
		}
		end := d.str(i)
		if d.fail != 0 {
			return nil, end
		}
		// The member's name as encoding/json decodes it; a string only for
		// the members read.
		text := b[i+1 : end-1]
		if !plain(text) {
			d.scratch = appendUnquoted(d.scratch[:0], text)
			text = d.scratch
		}
		next := p.member(text)
		var name string
		if next != nil {
			name = string(text)
		}
		i = d.space(end)
		if i == len(b) {
			return nil, d.early()
		}
		if b[i] != ':' {
			return nil, d.syntax(i)
		}
		i = d.space(i + 1)
		if i == len(b) {
			return nil, d.early()
		}
		v, end2 := d.value(i, next)
		if d.fail != 0 {
			return nil, end2
		}
		if next != nil {
			m[name] = v
		}
		i = d.space(end2)
		if i == len(b) {
			return nil, d.early()
		}
		switch b[i] {
		case ',':
			i = d.space(i + 1)
		case '}':
			d.depth--
			return m, i + 1
		default:
			return nil, d.syntax(i)
		}
	}
}

// keyArray builds an array that is the key itself: its elements are the
// key's parts up to the first that is not a string (keyOf stops there);
// the rest is checked only.
func (d *decoder) keyArray(i int) (any, int) {
	b := d.b
	if !d.open(i) {
		return nil, len(b)
	}
	out := []any{}
	i = d.space(i + 1)
	if i == len(b) {
		return nil, d.early()
	}
	if b[i] == ']' {
		d.depth--
		return out, i + 1
	}
	stopped := false
	for {
		if i == len(b) {
			return nil, d.early()
		}
		var elem *plan
		if !stopped {
			elem = partPlan
		}
		v, end := d.value(i, elem)
		if d.fail != 0 {
			return nil, end
		}
		if !stopped {
			out = append(out, v)
			_, isString := v.(string)
			stopped = !isString
		}
		i = d.space(end)
		if i == len(b) {
			return nil, d.early()
		}
		switch b[i] {
		case ',':
			i = d.space(i + 1)
		case ']':
			d.depth--
			return out, i + 1
		default:
			return nil, d.syntax(i)
		}
	}
}

// skipContainer checks the array or object at i and returns where it ends.
// It keeps its open containers on d.kinds, not on the call stack: a body
// may nest ten thousand levels. It never calls value, so it is never inside
// itself: its containers start from an empty stack.
func (d *decoder) skipContainer(i int) int {
	b := d.b
	d.kinds = d.kinds[:0]
	for {
		// i is at a value's first byte.
		if c := b[i]; c == '{' || c == '[' {
			if !d.open(i) {
				return len(b)
			}
			i = d.space(i + 1)
			if i == len(b) {
				return d.early()
			}
			if b[i] != c+2 { // not empty: '{'+2 is '}', '['+2 is ']'
				d.kinds = append(d.kinds, c)
				if c == '{' {
					if i = d.memberName(i); d.fail != 0 {
						return i
					}
				}
				continue
			}
			i++
			d.depth--
			if len(d.kinds) == 0 {
				return i
			}
		} else {
			switch c {
			case '"':
				i = d.str(i)
			case 't':
				i = d.literal(i, "true")
			case 'f':
				i = d.literal(i, "false")
			case 'n':
				i = d.literal(i, "null")
			default:
				if c != '-' && !isDigit(c) {
					return d.syntax(i)
				}
				i = d.number(i)
			}
			if d.fail != 0 {
				return i
			}
		}
		// After a value: closing brackets, then a comma and, in an object,
		// the next member's name.
		for {
			i = d.space(i)
			if i == len(b) {
				return d.early()
			}
			top := d.kinds[len(d.kinds)-1]
			if b[i] == ',' {
				i = d.space(i + 1)
				if i == len(b) {
					return d.early()
				}
				if top == '{' {
					if i = d.memberName(i); d.fail != 0 {
						return i
					}
				}
				break
			}
			if b[i] != top+2 {
				return d.syntax(i)
			}
			i++
			d.kinds = d.kinds[:len(d.kinds)-1]
			d.depth--
			if len(d.kinds) == 0 {
				return i
			}
		}
	}
}

// memberName checks a member name and its colon at i and returns where its
// value begins (white space skipped).
func (d *decoder) memberName(i int) int {
	b := d.b
	if b[i] != '"' {
		return d.syntax(i)
	}
	i = d.str(i)
	if d.fail != 0 {
		return i
	}
	i = d.space(i)
	if i == len(b) {
		return d.early()
	}
	if b[i] != ':' {
		return d.syntax(i)
	}
	i = d.space(i + 1)
	if i == len(b) {
		return d.early()
	}
	return i
}

// inString is true for the bytes a string holds as they are: not a quote,
// a backslash or a control character.
var inString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Eight bytes at a time: the bytes of a word, and its high bits.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether none of the eight bytes of x ends a string's
// plain run: no byte below 0x20, no quote, no backslash (the classic
// "has a byte less than n" and "has a zero byte" tests).
func plainWord(x uint64) bool {
	q, bs := x^(ones*'"'), x^(ones*'\\')
	return ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs == 0
}

// str checks the string at i and returns where it ends. Long strings are
// read eight bytes at a time: a 1 MiB string is the cheapest body to send
// and must stay cheap to check.
func (d *decoder) str(i int) int {
	b := d.b
	j := i + 1
	// Most strings are short names: a few bytes one by one first.
	for short := min(j+16, len(b)); j < short && inString[b[j]]; j++ {
	}
	if j < len(b) && b[j] == '"' {
		return j + 1
	}
	if d.valid {
		if end := d.validStr(j); end > 0 {
			return end
		}
	}
	for {
		for j+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[j:])) {
			j += 8
		}
		for j < len(b) && inString[b[j]] {
			j++
		}
		if j == len(b) {
			return d.early()
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1
		case c < 0x20:
			return d.syntax(j)
		}
		// A backslash.
		j++
		if j == len(b) {
			return d.early()
		}
		switch b[j] {
		case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
		case 'u':
			for range 4 {
				j++
				if j == len(b) {
					return d.early()
				}
				if !isHex(b[j]) {
					return d.syntax(j)
				}
			}
		default:
			return d.syntax(j)
		}
		j++
	}
}

// validStr returns where the string that goes on at j ends, in a body
// already known to be valid JSON (no control character, every escape well
// formed), with the vectorised search for quotes and backslashes; 0 if it
// finds no end.
func (d *decoder) validStr(j int) int {
	b := d.b
	quote := -1
	for {
		if quote < j {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return 0
			}
			quote = j + k
		}
		k := bytes.IndexByte(b[j:quote], '\\')
		if k < 0 {
			return quote + 1
		}
		j += k + 2 // the backslash and the byte it escapes, which may be a quote
	}
}

// plain reports whether a string's contents are its text: no escape, and
// ASCII only (anything else is unquoted to be compared or kept).
func plain(s []byte) bool {
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number checks the number at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// ending at the first byte that cannot continue it.
func (d *decoder) number(i int) int {
	b := d.b
	if b[i] == '-' {
		i++
		if i == len(b) {
			return d.early()
		}
	}
	switch {
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	default:
		return d.syntax(i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i == len(b) {
			return d.early()
		}
		if !isDigit(b[i]) {
			return d.syntax(i)
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i == len(b) {
			return d.early()
		}
		if b[i] == '+' || b[i] == '-' {
			i++
			if i == len(b) {
				return d.early()
			}
		}
		if !isDigit(b[i]) {
			return d.syntax(i)
		}
		for i++; i < len(b) && isDigit(b[i]); i++ {
		}
	}
	return i
}

// literal checks true, false or null at i.
func (d *decoder) literal(i int, word string) int {
	b := d.b
	for k := range len(word) {
		if i+k == len(b) {
			return d.early()
		}
		if b[i+k] != word[k] {
			return d.syntax(i + k)
		}
	}
	return i + len(word)
}

// appendUnquoted appends the text of a string's contents s (between the
// quotes, already checked) as encoding/json decodes it: escapes resolved, a
// lone surrogate and each byte of invalid UTF-8 replaced by U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := hex4(s[r+2 : r+6])
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := rune(-1)
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						rr1 = hex4(s[r+2 : r+6])
					}
					if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
						r += 6
						dst = utf8.AppendRune(dst, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			dst = utf8.AppendRune(dst, rr)
		}
	}
	return dst
}

// hex4 is the value of four hex digits, or -1.
func hex4(s []byte) rune {
	var r rune
	for _, c := range s {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// rawAt returns the raw bytes of the value that path selects in body, a
// valid JSON document with no duplicate member names (the fingerprint
// accepted it): "null" when a member on the path is missing or the value
// on the way is not an object, as JMESPath gives null then. Only the
// values on the path are read member by member; the others are skipped.
// ok is false if the body turns out not to be valid (it never should).
func rawAt(body []byte, path []string) (raw []byte, ok bool) {
	d := decoder{b: body, valid: true}
	i := d.space(0)
	for _, name := range path {
		if i >= len(body) || body[i] != '{' {
			return []byte("null"), d.fail == 0
		}
		i = d.space(i + 1)
		for found := false; !found; {
			if i >= len(body) || body[i] != '"' {
				return []byte("null"), d.fail == 0 && i < len(body) && body[i] == '}'
			}
			end := d.str(i)
			if d.fail != 0 {
				return nil, false
			}
			text := body[i+1 : end-1]
			if !plain(text) {
				d.scratch = appendUnquoted(d.scratch[:0], text)
				text = d.scratch
			}
			found = string(text) == name
			if i = d.space(end); i >= len(body) || body[i] != ':' {
				return nil, false
			}
			if i = d.space(i + 1); i >= len(body) {
				return nil, false
			}
			if found {
				break
			}
			_, end = d.value(i, nil)
			if d.fail != 0 {
				return nil, false
			}
			if i = d.space(end); i < len(body) && body[i] == ',' {
				i = d.space(i + 1)
			}
		}
	}
	if i >= len(body) {
		return nil, false
	}
	_, end := d.value(i, nil)
	if d.fail != 0 {
		return nil, false
	}
	return body[i:end], true
}

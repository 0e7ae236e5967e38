package canonjson

import (
	"bytes"
	"math"
	"math/bits"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// member is an object member: where its name's text (after the opening
// quote, undecoded) is in the input, and its length. plainBit marks a name
// that is its own decoding, with byte order as UTF-16 order: no escapes,
// nothing from U+E000 up.
type member struct{ at, n uint32 }

const plainBit = 1 << 31

func newMember(name []byte, at int) member {
	m := member{at: uint32(at), n: uint32(len(name))}
	for _, c := range name {
		if c == '\\' || c >= 0xEE {
			return m
		}
	}
	m.at |= plainBit
	return m
}

func (m member) start() int  { return int(m.at &^ plainBit) }
func (m member) plain() bool { return m.at&plainBit != 0 }

// name returns the text of m's name (between the quotes, undecoded).
func (c *canon) name(m member) []byte {
	start := m.start()
	return c.src[start : start+int(m.n)]
}

// key is a member's sort key: the first eight bytes of its name's sort
// form (see appendSortForm), zero-padded. Keys that differ order their
// names; equal keys say nothing.
func (c *canon) key(m member) uint64 {
	head := c.name(m)
	if !m.plain() {
		c.keyBuf = appendSortForm(c.keyBuf[:0], head, 8)
		head = c.keyBuf
	}
	var key uint64
	for k := range 8 {
		key <<= 8
		if k < len(head) {
			key |= uint64(head[k])
		}
	}
	return key
}

// appendSortForm appends at least limit bytes (or all) of the sort form of
// a name's text: the decoded name in UTF-8, after moving the code points so
// that their byte order is UTF-16's (U+10000 and up, surrogate pairs in
// UTF-16, go below U+E000..U+FFFF). A plain name is its own sort form.
func appendSortForm(dst, name []byte, limit int) []byte {
	for start := len(dst); len(name) > 0 && len(dst)-start < limit; {
		r, size := nameRune(name)
		name = name[size:]
		switch {
		case r >= 0x10000:
			r -= 0x2000 // to U+E000..U+10DFFF
		case r >= 0xE000:
			r += 0x100000 // to U+10E000..U+10FFFF
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// sortMembers sorts an object's members by their decoded names' UTF-16
// code units (RFC 8785 §3.2.3), and reports a duplicate name if there is
// one. Wide objects are sorted as integers: each member's key, with its
// index in the low bits, so that slices.Sort needs no comparison function;
// only members whose keys tie compare whole names (sortRun).
func (c *canon) sortMembers(ms []member) (dup member, found bool) {
	if len(ms) <= 12 {
		slices.SortFunc(ms, c.cmp)
		for k := 1; k < len(ms); k++ {
			if c.compareNames(ms[k-1], ms[k]) == 0 {
				return ms[k], true
			}
		}
		return member{}, false
	}
	mask := uint64(1)<<bits.Len(uint(len(ms)-1)) - 1
	order := c.order[:len(ms)]
	for k, m := range ms {
		order[k] = c.key(m)&^mask | uint64(k)
	}
	slices.Sort(order)
	for lo := 0; lo < len(order); {
		hi := lo + 1
		for hi < len(order) && order[hi]&^mask == order[lo]&^mask {
			hi++
		}
		if hi-lo > 1 {
			if dup, found := c.sortRun(ms, order[lo:hi], mask); found {
				return dup, true
			}
		}
		lo = hi
	}
	// Apply the order through the scratch: a member is as wide as an entry.
	for k, o := range order {
		m := ms[o&mask]
		order[k] = uint64(m.at)<<32 | uint64(m.n)
	}
	for k, o := range order {
		ms[k] = member{at: uint32(o >> 32), n: uint32(o)}
	}
	return member{}, false
}

// sortRun sorts entries of sortMembers' order whose keys tie, by their
// whole names. Plain names compare as bytes; otherwise every name of the
// run is decoded to its sort form once, and the run sorted on those.
func (c *canon) sortRun(ms []member, run []uint64, mask uint64) (dup member, found bool) {
	t := &c.tie
	t.members, t.mask = ms, mask
	decode := false
	for _, o := range run {
		decode = decode || !ms[o&mask].plain()
	}
	compare := t.plain
	if decode {
		t.text, t.ends, t.index = t.text[:0], t.ends[:0], t.index[:0]
		for k, o := range run {
			t.text = appendSortForm(t.text, c.name(ms[o&mask]), math.MaxInt)
			t.ends = append(t.ends, uint32(len(t.text)))
			t.index = append(t.index, uint32(o&mask))
			run[k] = o&^mask | uint64(k) // its place in the run, while sorting
		}
		compare = t.decoded
	}
	slices.SortFunc(run, compare)
	for k := 1; k < len(run) && !found; k++ {
		found = compare(run[k-1], run[k]) == 0
	}
	if decode {
		for k, o := range run {
			run[k] = o&^mask | uint64(t.index[o&mask])
		}
	}
	if found {
		return ms[run[0]&mask], true // the message gives only a length; any name of the run is near enough
	}
	return member{}, false
}

// ties is sortRun's state, kept with the canon so that its comparison
// functions are bound once.
type ties struct {
	c       *canon
	members []member
	mask    uint64
	// The sort forms of a run's names: the k-th ends at ends[k] in text;
	// index[k] is its member's index.
	text           []byte
	ends, index    []uint32
	plain, decoded func(x, y uint64) int
}

func (t *ties) init(c *canon) {
	t.c = c
	t.plain = func(x, y uint64) int { return t.c.compareNames(t.members[x&t.mask], t.members[y&t.mask]) }
	t.decoded = func(x, y uint64) int { return bytes.Compare(t.form(x&t.mask), t.form(y&t.mask)) }
}

func (t *ties) form(k uint64) []byte {
	start := uint32(0)
	if k > 0 {
		start = t.ends[k-1]
	}
	return t.text[start:t.ends[k]]
}

// compareNames orders two members by their decoded names' UTF-16 code
// units: by code point, except that characters above U+FFFF (surrogate
// pairs) sort before U+E000..U+FFFF.
func (c *canon) compareNames(a, b member) int {
	x, y := c.name(a), c.name(b)
	if a.plain() && b.plain() {
		return bytes.Compare(x, y)
	}
	for len(x) > 0 && len(y) > 0 {
		ra, na := nameRune(x)
		rb, nb := nameRune(y)
		if ra != rb {
			return cmpUnits(ra, rb)
		}
		x, y = x[na:], y[nb:]
	}
	return len(x) - len(y)
}

// cmpUnits compares two different runes by their UTF-16 code units.
func cmpUnits(ra, rb rune) int {
	return int(unit(ra)) - int(unit(rb))
}

// unit is a rune's UTF-16 code units as one number that orders two
// different runes: a surrogate pair's lead (0xD800-0xDBFF) sorts below
// U+E000, and two runes above U+FFFF sharing their lead compare as runes.
func unit(r rune) rune {
	if r >= 0x10000 {
		r1, r2 := utf16.EncodeRune(r)
		return r1<<10 | (r2 & 0x3FF)
	}
	return r << 10
}

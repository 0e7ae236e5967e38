package canonjson

// The rewrite against the oracle (oracle_impl_test.go, the implementation
// whose output every stored fingerprint was made with): the same bytes for
// every input the oracle accepts, except a document nested deeper than
// MaxDepth, which is refused now.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// vectors are the RFC 8785 samples and the invalid forms of the other
// tests, and nasty cases for nesting, names and numbers.
var vectors = []string{
	" { \"b\" : 1 ,\n\"a\":[ true , false,null ] } ", `{"z":{"y":1,"x":2},"a":{}}`, `[{},[],""]`,
	`{"\u20ac":"Euro","\r":"CR","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
	`"\u0041\/\u001f\b\f\n\r\t\"\\<>\u2028"`, `[9007199254740993,12345678901234567891,0,-12]`,
	`[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001,-0.0,1e21,1e20,1.0,1e2,-1.5e300,5e-324,0.1,123e-8]`,
	`{"a":}`, `{} {}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, "\"\xff\"", ``,
	`{"b":1,"a":[1.5,"x"]}`, `[1e30,-0.0]`, `"\u00e9"`, "-0", "1e400", `"\ud83d"`, `"\ude00x"`, `[-0,1.5e-7,100]`,
	// Names: escaped and raw forms of one name, surrogate pairs against
	// U+E000..U+FFFF, prefixes, and escapes that decode to what is escaped.
	`{"\u00e9":1,"é":2}`, `{"\ud83d\ude00":1,"\uffff":2,"\ue000":3,"😀a":4}`, `{"ab":1,"a":2,"":3,"a\u0000":4}`,
	`{"\"":1,"\\":2,"\/":3,"/x":4,"\u001F":5,"\b":6}`, `{"\ud83d\ude00":1,"\ud83d\ude01":2,"\ud83c\udf00":3}`,
	`{"a":{"b":{"c":[{"d":1,"c":2}],"a":[]},"a":0}}`, `{"a":[[[{"z":1,"y":{}}]]],"A":{"\u0000":[]}}`,
	`{"x":1,"\ud800":2}`, `{"\ud800":1,"\ud800":2}`, `{"a":{"b":1,"b":2},"a":3}`, `[{"a":1},{"a":1,"a":1}]`,
	// Numbers.
	`[0,-0,0.0,-0.0,0e0,0E-0,1e0,1E+0,10e-1,1.0e1,0.1e1,100e-2]`, `[1e-6,1e-7,123456789e-15,1e21,1e20,999999999999999999999]`,
	`[4.94065645841246544e-324,2.2250738585072014e-308,1.7976931348623157e308,1e-400,-1e-400]`,
	`[0.30000000000000004,9007199254740993.0,1.5e-323,5e-324,-5e-324]`, `[1e308,1e309]`, `-1e309`,
	`{"n":-00}`, `[01]`, `[1.]`, `[.5]`, `[1e]`, `[+1]`, `[0x10]`, `[Infinity]`, `[NaN]`,
	// Whitespace and structure.
	"\t[\r\n1 ,\t2 ]\n", `[[[[[[[[[[]]]]]]]]]]`, `{"a":[{}]}`, `[`, `]`, `{"a"}`, `{"a":1,}`, `[1,]`, `"\x"`, "\"\x01\"",
}

// corpus returns the inputs saved under testdata/fuzz for target.
func corpus(t testing.TB, target string) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	var inputs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1 corpus file: one []byte("...") line.
		for _, line := range strings.Split(string(b), "\n") {
			if q, ok := strings.CutPrefix(line, "[]byte("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					inputs = append(inputs, s)
				}
			}
		}
	}
	return inputs
}

// depthOf returns how deep arrays and objects nest in a document (any
// input: brackets outside strings are counted).
func depthOf(b []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// sameAsOracle fails t unless Append and Write agree with the oracle on in:
// the same bytes, or both refuse (a document deeper than MaxDepth must be
// refused with ErrTooDeep).
func sameAsOracle(t *testing.T, in []byte) {
	t.Helper()
	// The first pass checks the syntax as json.Valid does.
	if depthOf(in) <= MaxDepth {
		c := canon{src: in}
		if got, want := c.index() == nil, json.Valid(in); got != want {
			t.Fatalf("%.200q: the syntax check says valid=%v, json.Valid %v", in, got, want)
		}
	}
	want, wantErr := oracleAppend(nil, in)
	got, err := Append(nil, in)
	if depthOf(in) > MaxDepth && wantErr == nil {
		if !errors.Is(err, ErrTooDeep) {
			t.Fatalf("%.80q… (%d levels): got %v; want ErrTooDeep", in, depthOf(in), err)
		}
		return
	}
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("%.200q: got %.200q, %v; the oracle gives %.200q, %v", in, got, err, want, wantErr)
	case err != nil && !errors.Is(err, ErrInvalid):
		t.Fatalf("%.200q: error %v does not wrap ErrInvalid", in, err)
	case !bytes.Equal(got, want):
		t.Fatalf("%.200q:\n got %.300q\nwant %.300q", in, got, want)
	}
	// Write gives the same bytes through its buffer.
	var w bytes.Buffer
	if werr := Write(&w, in); (werr != nil) != (err != nil) || (werr == nil && !bytes.Equal(w.Bytes(), want)) {
		t.Fatalf("%.200q: Write gave %.300q, %v; Append %.300q, %v", in, w.Bytes(), werr, got, err)
	}
}

func TestMatchesOracle(t *testing.T) {
	var inputs []string
	inputs = append(inputs, vectors...)
	inputs = append(inputs, corpus(t, "FuzzAppendIdempotent")...)
	inputs = append(inputs, corpus(t, "FuzzAgainstOracle")...)
	for _, in := range inputs {
		sameAsOracle(t, []byte(in))
	}
	// The worst cases, small enough for the oracle's quadratic work, and
	// at exactly MaxDepth and one level deeper.
	for _, s := range shapes {
		sameAsOracle(t, []byte(s.body(16<<10)))
	}
	for _, d := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		sameAsOracle(t, []byte(around(d, "[", "]", 4<<10)))
		sameAsOracle(t, []byte(around(d, `{"\u0041":`, "}", 8<<10)))
		sameAsOracle(t, []byte(strings.Repeat(`[{"b":0,"a":`, d/2)+"1"+strings.Repeat("}]", d/2)))
	}
}

func TestRefusesDeeperThanMaxDepth(t *testing.T) {
	for _, tt := range []struct {
		depth int
		want  error
	}{{MaxDepth, nil}, {MaxDepth + 1, ErrTooDeep}, {10 * MaxDepth, ErrTooDeep}} {
		in := nest(tt.depth, "1")
		if got := depthOf([]byte(in)); got != tt.depth {
			t.Fatalf("the test body nests %d levels, want %d", got, tt.depth)
		}
		if _, err := Append(nil, []byte(in)); !errors.Is(err, tt.want) || (tt.want != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%d levels: got %v; want %v", tt.depth, err, tt.want)
		}
	}
}

// nest wraps leaf in depth levels, arrays and objects in turn.
func nest(depth int, leaf string) string {
	var open, close strings.Builder
	for i := range depth {
		if i%2 == 0 {
			open.WriteString("[")
		} else {
			open.WriteString(`{"a":`)
		}
	}
	for i := depth - 1; i >= 0; i-- {
		if i%2 == 0 {
			close.WriteString("]")
		} else {
			close.WriteString("}")
		}
	}
	return open.String() + leaf + close.String()
}

// FuzzAgainstOracle looks for an input on which the rewrite and the oracle
// disagree. Run longer with:
//
//	go test -run '^$' -fuzz FuzzAgainstOracle ./internal/canonjson/
func FuzzAgainstOracle(f *testing.F) {
	for _, in := range vectors {
		f.Add([]byte(in))
	}
	for _, s := range shapes {
		f.Add([]byte(s.body(256)))
	}
	f.Add([]byte(around(MaxDepth+1, "[", "]", 0)))
	f.Fuzz(func(t *testing.T, in []byte) {
		sameAsOracle(t, in)
	})
}

// FuzzShapes builds documents from a nesting pattern and a leaf, so that
// the fuzzer explores depth and number forms rather than syntax: each byte
// of pattern opens one level (an array, an object with a member before or
// after the nested one, or an array with siblings), around a leaf number
// built from digits, a fraction and an exponent.
//
//	go test -run '^$' -fuzz FuzzShapes ./internal/canonjson/
func FuzzShapes(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, "123", "45", "-7", uint16(1))
	f.Add([]byte{1, 1, 1}, "0", "", "+308", uint16(3))
	f.Add([]byte{}, "9007199254740993", "", "", uint16(0))
	f.Add([]byte{2}, "-0", "0", "400", uint16(0))
	f.Add([]byte{3, 0}, "1", "5", "-324", uint16(2))
	f.Add([]byte{1}, "17976931348623157", "", "292", uint16(900))
	f.Fuzz(func(t *testing.T, pattern []byte, digits, fraction, exponent string, repeat uint16) {
		num := strings.TrimLeft(digitsOnly(digits), "0")
		if num == "" {
			num = "0"
		}
		if strings.HasPrefix(digits, "-") {
			num = "-" + num
		}
		if f := digitsOnly(fraction); f != "" {
			num += "." + f
		}
		if e := digitsOnly(exponent); e != "" {
			sign := ""
			if strings.HasPrefix(exponent, "-") || strings.HasPrefix(exponent, "+") {
				sign = exponent[:1]
			}
			num += "e" + sign + e
		}
		// repeat deepens the pattern past MaxDepth at times.
		levels := pattern
		for range int(repeat) % 1200 / max(len(pattern), 1) {
			levels = append(levels, pattern...)
		}
		var doc strings.Builder
		for i, l := range levels {
			switch l % 4 {
			case 0:
				doc.WriteString("[")
			case 1:
				doc.WriteString(`{"k` + strconv.Itoa(i%3) + `":`)
			case 2:
				doc.WriteString(`{"\u00e9":1,"z":`)
			default:
				doc.WriteString("[" + num + ",")
			}
		}
		doc.WriteString(num)
		doc.WriteString(closers(levels, num))
		sameAsOracle(t, []byte(doc.String()))
	})
}

func digitsOnly(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// closers closes the levels FuzzShapes opened, innermost first.
func closers(levels []byte, num string) string {
	var b strings.Builder
	for i := len(levels) - 1; i >= 0; i-- {
		switch levels[i] % 4 {
		case 0:
			b.WriteString("]")
		case 1:
			b.WriteString(`,"a":` + num + "}")
		case 2:
			b.WriteString("}")
		default:
			b.WriteString(",-0.0]")
		}
	}
	return b.String()
}

// TestWorstCaseBodiesAllocateLittle fingerprints a 1 MiB body of every
// worst-case shape and checks the outcome and the bytes allocated
// (runtime.MemStats.TotalAlloc before and after). The old implementation
// allocated depth × size here: 1 GB and more for the deep shapes.
//
// The race detector changes what escapes to the heap, so the test skips
// under it; make test runs it without (with TestAgainstJSONText).
func TestWorstCaseBodiesAllocateLittle(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are measured without -race (make test runs this test so)")
	}
	const size = 1 << 20
	// The output goes to a hash; the input is not copied. What is left is
	// 16 bytes per object member (the member stack and the sort's scratch)
	// and up to 16 per array or object that is a member's value (the index,
	// grown by doubling): at most about three times the body for the widest
	// shapes. 64 KiB covers the fixed parts.
	const limit = 4*size + 64<<10
	for _, s := range shapes {
		body := []byte(s.body(size))
		h := sha256.New()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := Write(h, body)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		switch {
		case s.deep && !errors.Is(err, ErrTooDeep):
			t.Errorf("%s: got %v; want ErrTooDeep", s.name, err)
		case !s.deep && err != nil:
			t.Errorf("%s: %v; want it accepted", s.name, err)
		}
		if alloc > limit {
			t.Errorf("%s (%d bytes): %d bytes allocated; want at most %d", s.name, len(body), alloc, limit)
		}
		t.Logf("%s: %d bytes, %d allocated", s.name, len(body), alloc)
	}
}

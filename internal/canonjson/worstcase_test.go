package canonjson

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A shape is a family of hostile bodies: body(size) is a document of about
// size bytes. Each is a worst case for one part of the work: depth (the old
// implementation copied every level), sorting, escapes, number formatting.
type shape struct {
	name string
	body func(size int) string
	// deep is true when body nests deeper than MaxDepth: refused with
	// ErrTooDeep (the old implementation accepted it, slowly).
	deep bool
}

// around nests a long string in depth levels of open/close.
func around(depth int, open, close string, size int) string {
	fill := max(size-depth*(len(open)+len(close))-2, 0)
	return strings.Repeat(open, depth) + `"` + strings.Repeat("x", fill) + `"` + strings.Repeat(close, depth)
}

// repeated is "[" + item(0) + "," + item(1) ... "]" up to about size bytes.
func repeated(open, close string, size int, item func(i int) string) string {
	var b strings.Builder
	b.WriteString(open)
	for i := 0; b.Len() < size-len(close); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item(i))
	}
	b.WriteString(close)
	return b.String()
}

var shapes = []shape{
	{name: "deep arrays around a long string (1,000 levels)", body: func(n int) string { return around(MaxDepth, "[", "]", n) }},
	{name: "deep objects around a long string (1,000 levels)", body: func(n int) string { return around(MaxDepth, `{"a":`, "}", n) }},
	{name: "deep objects around a long string (5,000 levels, refused)", deep: true, body: func(n int) string { return around(5*MaxDepth, `{"a":`, "}", n) }},
	{name: "wide object (distinct names)", body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return fmt.Sprintf(`"k%07d":%d`, (i*7919)%10_000_000, i) })
	}},
	{name: "wide object (escaped names)", body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return fmt.Sprintf(`"\u00e9\n%d":0`, (i*7919)%10_000_000) })
	}},
	{name: "wide object of empty containers", body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return `"` + strconv.FormatInt(int64(i), 36) + `":` + [...]string{"[]", "{}"}[i%2] })
	}},
	{name: "objects in an array", body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return `{"b":1,"a":[2]}` })
	}},
	{name: "empty containers", body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return [...]string{"[]", "{}"}[i%2] })
	}},
	{name: "long escaped string", body: func(n int) string {
		return `"` + strings.Repeat(`\u00e9\n\"\\\ud83d\ude00\/`, max(n-2, 0)/32) + `"`
	}},
	{name: "long plain string", body: func(n int) string { return `"` + strings.Repeat("y", max(n-2, 0)) + `"` }},
	{name: "huge integer", body: func(n int) string { return "-" + strings.Repeat("9", max(n-1, 1)) }},
	{name: "huge decimal", body: func(n int) string { return "0." + strings.Repeat("1", max(n-6, 1)) + "e-5" }},
	{name: "many decimals", body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return strconv.FormatFloat(float64(i)*1.37e-7, 'g', -1, 64) })
	}},
	{name: "many small integers", body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return "1" })
	}},
}

// BenchmarkWorstCase fingerprints a 1 MiB body of each shape (SHA-256 of
// the canonical form), before (the oracle: the implementation this package
// replaced) and after. Besides the wall time it reports the process's CPU
// time per fingerprint (cpu-ns/op), which a busy machine disturbs less.
// make bench puts the figures in BENCHMARKS.md:
//
//	go test -run '^$' -bench 'WorstCase/after' -benchmem -benchtime 20x -count 5 ./internal/canonjson/
//	go test -run '^$' -bench 'WorstCase/before' -benchmem -benchtime 1x -count 3 ./internal/canonjson/
func BenchmarkWorstCase(b *testing.B) {
	const size = 1 << 20
	for _, s := range shapes {
		body := []byte(s.body(size))
		b.Run("after/"+benchName(s.name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			start := cpuTime()
			for b.Loop() {
				h := sha256.New()
				if err := Write(h, body); (err != nil) != s.deep {
					b.Fatal(err)
				}
				h.Sum(nil)
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
		b.Run("before/"+benchName(s.name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			start := cpuTime()
			for b.Loop() {
				out, err := oracleAppend(nil, body)
				if err != nil {
					b.Fatal(err)
				}
				sha256.Sum256(out)
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchName makes a shape's name a benchmark name: no spaces, no commas
// or parentheses. cmd/bench turns it back with shapeName.
func benchName(s string) string {
	return strings.NewReplacer(" ", "_", ",", "", "(", "", ")", "").Replace(s)
}

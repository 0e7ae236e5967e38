package canonjson

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/testing/worstcase"
)

// A shape is a family of hostile bodies (package worstcase holds them, for
// the SQS adapter's tests too): body(size) is a document of about size
// bytes. Each is a worst case for one part of the work: depth (the old
// implementation copied every level), sorting, escapes, number formatting.
type shape struct {
	name string
	body func(size int) string
	// deep is true when body nests deeper than MaxDepth: refused with
	// ErrTooDeep (the old implementation accepted it, slowly).
	deep bool
}

var shapes = func() []shape {
	out := make([]shape, len(worstcase.Shapes))
	for i, s := range worstcase.Shapes {
		out[i] = shape{name: s.Name, body: s.Body, deep: s.Deep}
	}
	return out
}()

// TestWorstCaseDepthIsMaxDepth keeps package worstcase's copy of MaxDepth
// (it cannot import this package) in step with it.
func TestWorstCaseDepthIsMaxDepth(t *testing.T) {
	if worstcase.Depth != MaxDepth {
		t.Fatalf("worstcase.Depth is %d; want MaxDepth, %d", worstcase.Depth, MaxDepth)
	}
}

// around nests a long string in depth levels of open/close.
func around(depth int, open, close string, size int) string {
	fill := max(size-depth*(len(open)+len(close))-2, 0)
	return strings.Repeat(open, depth) + `"` + strings.Repeat("x", fill) + `"` + strings.Repeat(close, depth)
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
// or parentheses. cmd/bench turns it back.
func benchName(s string) string { return worstcase.BenchName(s) }

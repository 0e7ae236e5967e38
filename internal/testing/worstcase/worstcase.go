// Package worstcase holds the hostile bodies that bound the work done on
// what strangers send: each Shape is a family of JSON documents that is a
// worst case for one part of that work (nesting, sorting members, escapes,
// number formatting, token density). The fingerprint's tests and
// benchmarks (package canonjson) and the SQS adapter's (package sqsbatch)
// measure the same shapes, and BENCHMARKS.md section 7 reports both.
//
// It is test support: no shipped binary links it.
package worstcase

import (
	"fmt"
	"strconv"
	"strings"
)

// Depth is the deepest nesting the fingerprint accepts (canonjson.MaxDepth;
// canonjson's tests check that the two agree). It is repeated here because
// canonjson's own tests import this package.
const Depth = 1000

// Size is the size of the bodies the tests and benchmarks measure: 1 MiB,
// the largest SQS message body.
const Size = 1 << 20

// A Shape is a family of hostile bodies: Body(size) is a document of
// about size bytes.
type Shape struct {
	Name string
	Body func(size int) string
	// Deep is true when Body nests deeper than Depth: the fingerprint
	// refuses it (canonjson.ErrTooDeep) before any other work.
	Deep bool
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

// Shapes are the worst cases, in the order BENCHMARKS.md lists them.
var Shapes = []Shape{
	{Name: "deep arrays around a long string (1,000 levels)", Body: func(n int) string { return around(Depth, "[", "]", n) }},
	{Name: "deep objects around a long string (1,000 levels)", Body: func(n int) string { return around(Depth, `{"a":`, "}", n) }},
	{Name: "deep objects around a long string (5,000 levels, refused)", Deep: true, Body: func(n int) string { return around(5*Depth, `{"a":`, "}", n) }},
	{Name: "wide object (distinct names)", Body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return fmt.Sprintf(`"k%07d":%d`, (i*7919)%10_000_000, i) })
	}},
	{Name: "wide object (escaped names)", Body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return fmt.Sprintf(`"\u00e9\n%d":0`, (i*7919)%10_000_000) })
	}},
	{Name: "wide object of empty containers", Body: func(n int) string {
		return repeated("{", "}", n, func(i int) string { return `"` + strconv.FormatInt(int64(i), 36) + `":` + [...]string{"[]", "{}"}[i%2] })
	}},
	{Name: "objects in an array", Body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return `{"b":1,"a":[2]}` })
	}},
	{Name: "empty containers", Body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return [...]string{"[]", "{}"}[i%2] })
	}},
	{Name: "long escaped string", Body: func(n int) string {
		return `"` + strings.Repeat(`\u00e9\n\"\\\ud83d\ude00\/`, max(n-2, 0)/32) + `"`
	}},
	{Name: "long plain string", Body: func(n int) string { return `"` + strings.Repeat("y", max(n-2, 0)) + `"` }},
	{Name: "huge integer", Body: func(n int) string { return "-" + strings.Repeat("9", max(n-1, 1)) }},
	{Name: "huge decimal", Body: func(n int) string { return "0." + strings.Repeat("1", max(n-6, 1)) + "e-5" }},
	{Name: "many decimals", Body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return strconv.FormatFloat(float64(i)*1.37e-7, 'g', -1, 64) })
	}},
	{Name: "many small integers", Body: func(n int) string {
		return repeated("[", "]", n, func(i int) string { return "1" })
	}},
}

// BenchName makes a shape's name a benchmark name: no spaces, no commas
// or parentheses. cmd/bench turns it back (underscores become spaces).
func BenchName(s string) string {
	return strings.NewReplacer(" ", "_", ",", "", "(", "", ")", "").Replace(s)
}

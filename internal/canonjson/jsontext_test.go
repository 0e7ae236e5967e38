//go:build goexperiment.jsonv2

package canonjson

// A differential test against the standard library's RFC 8785
// canonicalizer, encoding/json/jsontext, which exists only behind
// GOEXPERIMENT=jsonv2 (make test runs this file that way). canonjson stays
// hand-written while jsontext is experimental; this test records exactly
// where the two differ, and fails on any other difference.

import (
	"encoding/json/jsontext"
	"errors"
	"strings"
	"testing"
)

// knownDifferences are the inputs on which the two disagree, and why.
// Each is a deliberate choice of canonjson's.
var knownDifferences = map[string]string{
	// jsontext saturates a float beyond the largest double at ±1.797…e308;
	// canonjson refuses it: two different huge numbers must not collide.
	"1e400": "canonjson refuses numbers beyond the largest double",
}

func jsontextCanonical(in []byte) ([]byte, error) {
	v := jsontext.Value(append([]byte(nil), in...))
	err := v.Canonicalize(jsontext.CanonicalizeRawInts(false))
	return v, err
}

// differentialInputs are the vectors of oracle_test.go, the fuzz seeds and
// the saved fuzz corpora.
func differentialInputs(t testing.TB) []string {
	inputs := append([]string{}, vectors...)
	inputs = append(inputs, nest(MaxDepth, "1.5e-7"), nest(MaxDepth+1, "1"))
	inputs = append(inputs, corpus(t, "FuzzAppendIdempotent")...)
	return append(inputs, corpus(t, "FuzzAgainstOracle")...)
}

// documented reports whether a difference is one of canonjson's deliberate
// choices: refusing a number jsontext saturates at the largest double, or
// a document nested deeper than MaxDepth.
func documented(in, theirs []byte, ourErr, theirErr error) bool {
	if ourErr == nil || theirErr != nil {
		return false
	}
	return overflows(theirs) || errors.Is(ourErr, ErrTooDeep)
}

func TestAgainstJSONText(t *testing.T) {
	for _, in := range differentialInputs(t) {
		ours, ourErr := Append(nil, []byte(in))
		theirs, theirErr := jsontextCanonical([]byte(in))
		same := (ourErr != nil) == (theirErr != nil) && (ourErr != nil || string(ours) == string(theirs))
		why, known := knownDifferences[in]
		if !same && !known && documented([]byte(in), theirs, ourErr, theirErr) {
			why, known = "canonjson refuses a number beyond the largest double or a document deeper than MaxDepth", true
		}
		switch {
		case same && known:
			t.Errorf("%q: listed as a difference (%s) but the two agree; remove it from knownDifferences", in, why)
		case !same && !known:
			t.Errorf("%q: canonjson gives %q (err %v), jsontext gives %q (err %v): an unexplained difference", in, ours, ourErr, theirs, theirErr)
		case !same:
			t.Logf("%q: differs as documented: %s (canonjson %q %v; jsontext %q %v)", in, why, ours, ourErr, theirs, theirErr)
		}
	}
}

// FuzzAgainstJSONText looks for differences the list above does not
// explain. Run with:
//
//	GOEXPERIMENT=jsonv2 go test -run '^$' -fuzz FuzzAgainstJSONText ./internal/canonjson/
func FuzzAgainstJSONText(f *testing.F) {
	for _, in := range differentialInputs(f) {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ours, ourErr := Append(nil, in)
		theirs, theirErr := jsontextCanonical(in)
		if _, known := knownDifferences[string(in)]; known {
			return
		}
		if documented(in, theirs, ourErr, theirErr) {
			return // 1e400 inside a larger document, or a deep one
		}
		if (ourErr != nil) != (theirErr != nil) || (ourErr == nil && string(ours) != string(theirs)) {
			t.Fatalf("%q: canonjson %q (err %v), jsontext %q (err %v)", in, ours, ourErr, theirs, theirErr)
		}
	})
}

// overflows reports whether jsontext saturated a number at the largest
// double, which canonjson refuses instead.
func overflows(canonical []byte) bool {
	return strings.Contains(string(canonical), "1.7976931348623157e+308")
}

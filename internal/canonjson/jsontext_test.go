//go:build goexperiment.jsonv2

package canonjson

// A differential test against the standard library's RFC 8785
// canonicalizer, encoding/json/jsontext, which exists only behind
// GOEXPERIMENT=jsonv2 (make test runs this file that way). canonjson stays
// hand-written while jsontext is experimental; this test records exactly
// where the two differ, and fails on any other difference.

import (
	"encoding/json/jsontext"
	"os"
	"path/filepath"
	"strconv"
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

// differentialInputs are the RFC 8785 vectors and invalid forms of the
// other tests, the fuzz seeds, and the saved fuzz corpus.
func differentialInputs(t testing.TB) []string {
	inputs := []string{
		" { \"b\" : 1 ,\n\"a\":[ true , false,null ] } ", `{"z":{"y":1,"x":2},"a":{}}`, `[{},[],""]`,
		`{"\u20ac":"Euro","\r":"CR","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
		`"\u0041\/\u001f\b\f\n\r\t\"\\<>\u2028"`, `[9007199254740993,12345678901234567891,0,-12]`,
		`[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001,-0.0,1e21,1e20,1.0,1e2,-1.5e300,5e-324,0.1,123e-8]`,
		`{"a":}`, `{} {}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, "\"\xff\"", ``,
		`{"b":1,"a":[1.5,"x"]}`, `[1e30,-0.0]`, `"\u00e9"`, "-0", "1e400", `"\ud83d"`, `"\ude00x"`, `[-0,1.5e-7,100]`,
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzAppendIdempotent", "*"))
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

func TestAgainstJSONText(t *testing.T) {
	for _, in := range differentialInputs(t) {
		ours, ourErr := Append(nil, []byte(in))
		theirs, theirErr := jsontextCanonical([]byte(in))
		same := (ourErr != nil) == (theirErr != nil) && (ourErr != nil || string(ours) == string(theirs))
		why, known := knownDifferences[in]
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
		if ourErr != nil && theirErr == nil && overflows(theirs) {
			return // the 1e400 difference, inside a larger document
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

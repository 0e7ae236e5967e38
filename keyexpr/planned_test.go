package keyexpr

import (
	"encoding/json"
	"errors"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jmespath-community/go-jmespath/pkg/parsing"

	"github.com/oncely/oncely/internal/canonjson"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/worstcase"
)

// oracleRequest is Request as it was before the planned decode (issue 29),
// kept as the oracle: the whole body decoded by encoding/json for the
// expressions.
func oracleRequest(x *Extractor, body []byte) (idem.Request, error) {
	fp, fpErr := idem.Fingerprint(body)
	if errors.Is(fpErr, canonjson.ErrTooDeep) {
		return idem.Request{}, fpErr
	}
	doc, err := decodeFull(body)
	if err != nil {
		return idem.Request{}, err
	}
	key, err := x.keyOf(doc)
	if err != nil {
		return idem.Request{}, err
	}
	if err := idem.ValidateKey(key); err != nil {
		return idem.Request{}, err
	}
	if fpErr != nil {
		return idem.Request{}, fpErr
	}
	if x.payload != nil {
		sel, err := x.payload.Search(doc)
		if err != nil {
			return idem.Request{}, &idem.Error{Code: idem.CodeInvalidPayload, Message: "the payload expression could not be evaluated on this body"}
		}
		payload, _ := json.Marshal(sel)
		if fp, err = idem.Fingerprint(payload); err != nil {
			return idem.Request{}, err
		}
	}
	return idem.Request{Key: key, Fingerprint: fp}, nil
}

// plannedExpressions are key expressions of every planned form, and one
// that is not (it decodes the whole body, as before).
var plannedExpressions = []struct{ key, payload string }{
	{"", ""},
	{DefaultExpression, "detail"},
	{"id", "a.b"},
	{"join(':', ['evt', id, action])", "@"},
	{"['evt', id, action]", "ids[0]"}, // a payload that is not a path: decoded whole
	{"join(':', ['evt', id, action])", ""},
	{"id", ""},
	{"detail.id", ""},
	{"@", ""},
	{"['x', a.b, a, `1`, \"id\"]", ""},
	{"[id, id.x, @, @.action, action]", ""},
	{"'constant-key'", ""},
	{"ids[0]", ""}, // not planned
}

func extractors(t testing.TB) []*Extractor {
	t.Helper()
	var xs []*Extractor
	for _, e := range plannedExpressions {
		x, err := New(e.key, e.payload)
		if err != nil {
			t.Fatal(err)
		}
		if (x.plan == nil) != (e.key == "ids[0]") {
			t.Fatalf("%q: planned %v; want %v", e.key, x.plan != nil, e.key != "ids[0]")
		}
		xs = append(xs, x)
	}
	return xs
}

// sameAsOracle checks that Request and the oracle agree on body: the same
// key and fingerprint, or the same code and message.
func sameAsOracle(t *testing.T, x *Extractor, body []byte) {
	t.Helper()
	got, gotErr := x.request(body)
	want, wantErr := oracleRequest(x, body)
	if got != want || errText(gotErr) != errText(wantErr) || code(gotErr) != code(wantErr) {
		t.Errorf("key expression %q, body %q:\n got %+v, %s %v\nwant %+v, %s %v", x.keySrc, clip(body), got, code(gotErr), gotErr, want, code(wantErr), wantErr)
	}
}

func code(err error) idem.Code {
	var e *idem.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func clip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// corpusBodies is every body the repository's tests already send: each
// string literal of the test files of the packages on the body's path
// (their tables and fuzz seeds), every on-disk fuzz corpus, and the
// worst-case shapes, small.
func corpusBodies(t testing.TB) []string {
	t.Helper()
	var bodies []string
	for _, dir := range []string{".", "../sqsbatch", "../internal/queue", "../internal/inbound", "../internal/canonjson", "../internal/eventsapi", "../internal/receiving", "../apigw", "../internal/idem"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		for _, f := range files {
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						bodies = append(bodies, s)
					}
				}
				return true
			})
		}
	}
	files, _ := filepath.Glob(filepath.Join("..", "internal", "*", "testdata", "fuzz", "*", "*"))
	public, _ := filepath.Glob(filepath.Join("..", "*", "testdata", "fuzz", "*", "*"))
	files = append(files, public...)
	if len(files) == 0 {
		t.Fatal("no fuzz corpus found under ../internal/*/testdata/fuzz or ../*/testdata/fuzz")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1: one value a line, []byte("...") or string("...").
		for _, line := range strings.Split(string(b), "\n") {
			for _, prefix := range []string{"[]byte(", "string("} {
				if q, ok := strings.CutPrefix(line, prefix); ok {
					if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
						bodies = append(bodies, s)
					}
				}
			}
		}
	}
	for _, s := range worstcase.Shapes {
		for _, n := range []int{0, 64, 4 << 10} {
			bodies = append(bodies, s.Body(n))
		}
	}
	for _, d := range []int{canonjson.MaxDepth, canonjson.MaxDepth + 1, maxNestingDepth, maxNestingDepth + 1} {
		bodies = append(bodies, strings.Repeat("[", d)+strings.Repeat("]", d), strings.Repeat("[", d)+"x", strings.Repeat(`{"id":`, d))
	}
	slices.Sort(bodies)
	return slices.Compact(bodies)
}

// TestPlannedDecodeMatchesFull runs every corpus body through Request and
// through the oracle (the whole body decoded, as before issue 29) for key
// expressions of every planned form, and wants the same key and
// fingerprint, or the same error: the same code (NOT_JSON before the key's
// codes before INVALID_PAYLOAD) and the same message.
func TestPlannedDecodeMatchesFull(t *testing.T) {
	bodies := corpusBodies(t)
	xs := extractors(t)
	for _, body := range bodies {
		for _, x := range xs {
			sameAsOracle(t, x, []byte(body))
		}
	}
	t.Logf("%d bodies, %d expressions", len(bodies), len(xs))
}

// TestPlannedDecodeMatchesFullOnRandomBodies does the same on random
// bodies: JSON documents made of the names the expressions read, then cut
// or with one byte changed, so that both the keys and the syntax errors
// are exercised.
func TestPlannedDecodeMatchesFullOnRandomBodies(t *testing.T) {
	xs := extractors(t)
	r := rand.New(rand.NewPCG(29, 6))
	n := 4000 // FuzzPlannedDecode explores further
	if testing.Short() || raceEnabled {
		n = 1000 // the race detector makes each body ten times slower; nothing here is concurrent
	}
	for range n {
		body := []byte(randomDoc(r, 0))
		if r.IntN(3) == 0 {
			body = []byte(keyedDoc(r))
		}
		switch r.IntN(5) {
		case 0:
			body = body[:r.IntN(len(body)+1)]
		case 1:
			if len(body) > 0 {
				const bytes = "{}[],:\"\\ 0-.eEtx\x00\xff"
				body[r.IntN(len(body))] = bytes[r.IntN(len(bytes))]
			}
		case 2:
			body = append(body, " ]}x,"[r.IntN(5)])
		}
		for _, x := range xs {
			sameAsOracle(t, x, body)
		}
	}
}

// keyedDoc is a random object with a good key for every expression
// (id, action) and random values at the payload expressions' paths
// (detail, a.b), in a random order, among other members.
func keyedDoc(r *rand.Rand) string {
	members := []string{`"id":"a1"`, `"action":"notify"`, `"detail":` + randomDoc(r, 1), `"a":{"b":` + randomDoc(r, 2) + `,"c":1}`, `"x":` + randomDoc(r, 1)}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return "{" + strings.Join(members[:2+r.IntN(4)], ",") + "}"
}

// randomDoc is a random JSON value, its names mostly ones the expressions
// read (some escaped, some repeated), its strings sometimes escaped or not
// UTF-8.
func randomDoc(r *rand.Rand, depth int) string {
	names := []string{"id", "action", "a", "b", "detail", "x", `i\u0064`, `\u0061`, "ids", "évt"}
	strs := []string{`"evt"`, `"a1"`, `"x:y"`, `""`, `"has space"`, `"\u00e9"`, `"\ud800"`, "\"\xff\"", `"\n"`, `"release-42"`, `"\ud83d\ude00"`}
	k := r.IntN(10)
	if depth > 4 {
		k = 9
	}
	switch k {
	case 0, 1, 2:
		var b strings.Builder
		b.WriteString("{")
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"` + names[r.IntN(len(names))] + `":` + randomDoc(r, depth+1))
		}
		b.WriteString("}")
		return b.String()
	case 3, 4:
		var b strings.Builder
		b.WriteString("[")
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString(" , ")
			}
			b.WriteString(randomDoc(r, depth+1))
		}
		b.WriteString("]")
		return b.String()
	case 5:
		return []string{"0", "-1.5e3", "12345678901234567890", "1E400", "-0"}[r.IntN(5)]
	case 6:
		return []string{"true", "false", "null"}[r.IntN(3)]
	}
	return strs[r.IntN(len(strs))]
}

// FuzzPlannedDecode looks for a body on which Request and the oracle
// disagree, for any planned expression. Run longer with:
//
//	go test -run '^$' -fuzz FuzzPlannedDecode ./keyexpr/
func FuzzPlannedDecode(f *testing.F) {
	// When fuzzing, the small corpus bodies seed it; as a plain test it
	// runs a few worst-case shapes only (TestPlannedDecodeMatchesFull runs
	// the corpus).
	if fl := flag.Lookup("test.fuzz"); fl != nil && fl.Value.String() != "" {
		for _, b := range corpusBodies(f) {
			if len(b) <= 256 {
				f.Add([]byte(b))
			}
		}
	}
	for _, s := range worstcase.Shapes {
		f.Add([]byte(s.Body(64)))
	}
	// Good keys, so that the payload expressions run.
	f.Add([]byte(`{"id":"a1","action":"notify","detail":{"x":[1,2.50,"\u00e9"]},"a":{"b":"c","d":null}}`))
	f.Add([]byte(`{"a":{"c":1,"b":[{}]},"id":"a1","action":"x","detail":null}`))
	xs := extractors(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, x := range xs {
			sameAsOracle(t, x, body)
		}
	})
}

// TestPlannedDecodeErrorsAreDecodes compares the planned decode's refusals
// with encoding/json's Decoder's byte for byte, for bodies where the two
// differ in subtle ways: a value followed by ']' or '}' (accepted: the
// Decoder's More is false), a number followed by a digit, the Decoder's
// depth limit, a body that ends inside a number or a literal.
func TestPlannedDecodeErrorsAreDecodes(t *testing.T) {
	for _, body := range []string{
		"", " ", "\u00a0", "\xef\xbb\xbf{}", "{}]", "{}}x", "[]]", `"a"]`, `"a"x`, "1]", "1 }", "01", "-", "-x", "1.", "1.x", "1e", "1e+", "1ex", "tru", "trux", "truex",
		"nul", "[1,]", `{"a":1,}`, `{,}`, "[,1]", `{"a" 1}`, `{"a":}`, `{"a":1 "b":2}`, `"\x01"`, `"\q"`, `"\u12"`, `"\u12g4"`, `"abc`, `[`, `[1`, `{"a"`, `{"a":`,
		"[}", "{]", "[1}", `{"a":1]`, " \t\r\n[ 1 , 2 ]\n", `{"id":"a","action":"b"} {}`, `{"id":"a","action":"b"}]junk`,
		strings.Repeat("[", maxNestingDepth) + strings.Repeat("]", maxNestingDepth),
		strings.Repeat("[", maxNestingDepth+1) + strings.Repeat("]", maxNestingDepth+1),
		strings.Repeat(`{"a":`, maxNestingDepth+1) + "1" + strings.Repeat("}", maxNestingDepth+1),
	} {
		want, wantErr := decodeFull([]byte(body))
		for _, p := range []*plan{{}, planOf(mustParse(t, DefaultExpression)), planOf(mustParse(t, "a"))} {
			_, gotErr := decodePlanned([]byte(body), p, false)
			if errText(gotErr) != errText(wantErr) {
				t.Errorf("%q: got %v; want %v (decoded %T)", clip([]byte(body)), gotErr, wantErr, want)
			}
		}
	}
}

func mustParse(t testing.TB, expr string) parsing.ASTNode {
	t.Helper()
	n, err := parsing.NewParser().Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// BenchmarkPlannedDecode runs the default key expression's planned decode
// alone over a 1 MiB body of each worst-case shape: the measure for a
// change to the decoder, which BenchmarkWorstCaseAdapter's figures
// (fingerprint and poison note included) would blur.
//
//	go test -run '^$' -bench PlannedDecode -benchmem ./keyexpr/
func BenchmarkPlannedDecode(b *testing.B) {
	p := planOf(mustParse(b, DefaultExpression))
	for _, s := range worstcase.Shapes {
		body := []byte(s.Body(worstcase.Size))
		valid := canonjson.Write(io.Discard, body) == nil
		b.Run(worstcase.BenchName(s.Name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := decodePlanned(body, p, valid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/idem"
)

// TestEveryEngineSettingIsWired: each field of idem.Options and
// idem.RetryPolicy is set by the code we ship (a composite literal in a
// shipped file), or is a seam for tests, listed here with why. A field
// nothing sets is a setting the docs describe and no deployment can use:
// "unknown errors are permanent (configurable)" once described
// Options.UnknownAs, which nothing set.
func TestEveryEngineSettingIsWired(t *testing.T) {
	seams := map[string]string{
		"Options.Now":      "the clock: tests inject a fake one",
		"Options.Sleep":    "tests record the backoff delays instead of sleeping",
		"Options.Random":   "tests fix the jitter",
		"Options.NewToken": "tests name the fencing tokens",
	}
	types := []reflect.Type{reflect.TypeFor[idem.Options](), reflect.TypeFor[idem.RetryPolicy]()}
	set := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() || !strings.HasSuffix(path, ".go") || !shipped(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			// The ready function builds its engine through the library, as
			// a team does: oncely.New(store, oncely.Options{...}) sets the
			// store and the fields of the same names (oncely.New hands
			// them to idem.Options, one for one).
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "oncely" {
						set["Options.Store"] = true
					}
				}
			}
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			name := ""
			switch ty := lit.Type.(type) {
			case *ast.SelectorExpr: // idem.Options{...} or oncely.Options{...} elsewhere
				if x, ok := ty.X.(*ast.Ident); ok && (x.Name == "idem" || x.Name == "oncely" && (ty.Sel.Name == "Options" || ty.Sel.Name == "RetryPolicy")) {
					name = ty.Sel.Name
				}
			case *ast.Ident: // Options{...} inside package idem
				if f.Name.Name == "idem" {
					name = ty.Name
				}
			}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && name != "" {
					// cmd/handler passes its golden test's seams on
					// (seamNow, ...: nil in the deployed bootstrap, so each
					// field keeps its default): that sets nothing.
					if v, ok := kv.Value.(*ast.Ident); ok && strings.HasPrefix(v.Name, "seam") {
						continue
					}
					if k, ok := kv.Key.(*ast.Ident); ok {
						set[name+"."+k.Name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range types {
		for f := range ty.Fields() {
			name := ty.Name() + "." + f.Name
			switch why, seam := seams[name]; {
			case !f.IsExported():
			case set[name] && seam:
				t.Errorf("idem.%s is listed as a test seam (%s), but shipped code sets it: drop it from the list", name, why)
			case !set[name] && !seam:
				t.Errorf("idem.%s: no shipped code sets it; wire it (and document it) or remove it", name)
			}
		}
	}
	if len(set) < 8 {
		t.Fatalf("found only %v set: the scan is broken", set)
	}
}

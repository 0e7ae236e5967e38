package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/idem"
)

// TestCodesListsEveryCode: idem.Codes is the one list operators' filters
// are checked against, so a code declared in codes.go and missing from it
// would be warned about as unknown. Every Code constant must be listed.
// The engine's codes are declared in package driver, the adapters' here.
func TestCodesListsEveryCode(t *testing.T) {
	declared := 0
	for _, file := range []string{"codes.go", "../../driver/codes.go"} {
		declared += checkListed(t, file)
	}
	if declared != len(idem.Codes) {
		t.Errorf("codes.go and driver/codes.go declare %d codes, idem.Codes lists %d; want the same", declared, len(idem.Codes))
	}
	for _, r := range idem.PoisonReasons {
		if !slices.Contains(idem.Codes, r) {
			t.Errorf("poison reason %s is not in idem.Codes", r)
		}
	}
}

// checkListed returns how many Code constants file declares, and fails the
// test for each missing from idem.Codes.
func checkListed(t *testing.T, file string) int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					continue
				}
				declared++
				code := idem.Code(strings.Trim(lit.Value, `"`))
				if !slices.Contains(idem.Codes, code) {
					t.Errorf("%s (%s) is declared in %s but missing from idem.Codes", name.Name, code, file)
				}
			}
		}
	}
	return declared
}

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
func TestCodesListsEveryCode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
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
					t.Errorf("%s (%s) is declared in codes.go but missing from idem.Codes", name.Name, code)
				}
			}
		}
	}
	if declared != len(idem.Codes) {
		t.Errorf("codes.go declares %d codes, idem.Codes lists %d; want the same", declared, len(idem.Codes))
	}
	for _, r := range idem.PoisonReasons {
		if !slices.Contains(idem.Codes, r) {
			t.Errorf("poison reason %s is not in idem.Codes", r)
		}
	}
}

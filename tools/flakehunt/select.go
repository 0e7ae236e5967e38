package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// What makes a test timing-dependent: it starts a server or an emulator
// (the test-support packages that start one, an httptest server, a
// process, a listener), or it waits on time.
var (
	// serverPackages start a server, an emulator or a process when any of
	// their names is used (by import path suffix).
	serverPackages = map[string]string{
		"internal/testing/rie":         "emulator",
		"internal/testing/ddblocal":    "DynamoDB server",
		"internal/testing/sqslocal":    "SQS server",
		"internal/testing/esm":         "event source runner",
		"internal/testing/fakewebhook": "webhook server",
		"internal/testing/faults":      "fault proxy",
		"internal/testing/soak":        "soak",
	}
	// serverCalls and waitCalls are package-qualified calls, by import path.
	serverCalls = map[string][]string{
		"net/http/httptest": {"NewServer", "NewUnstartedServer", "NewTLSServer"},
		"os/exec":           {"Command", "CommandContext"},
		"net":               {"Listen", "Dial", "DialTimeout", "ListenPacket"},
	}
	waitCalls = map[string][]string{
		"time":    {"Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"},
		"context": {"WithTimeout", "WithDeadline"},
	}
)

// A testFunc is one top-level test, with why it was selected ("" if not).
type testFunc struct {
	Name   string
	Reason string
}

// funcDecl is a declaration with the imports of its file.
type funcDecl struct {
	decl    *ast.FuncDecl
	imports map[string]string // local name -> import path
	test    bool              // declared in a _test.go file
}

// selectTests parses the package's Go files (test files and the others,
// since helpers live in both) and returns its Test functions, each with
// the first reason found by following the calls it makes to functions and
// methods of the same package (by name: a method of another type with the
// same name is followed too, which can only select more).
func selectTests(dir string, goFiles, testFiles []string) ([]testFunc, error) {
	fset := token.NewFileSet()
	byName := map[string][]funcDecl{}
	var tests []funcDecl
	parse := func(name string, isTest bool) error {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		imports := map[string]string{}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			local := path[strings.LastIndex(path, "/")+1:]
			if im.Name != nil {
				local = im.Name.Name
			}
			imports[local] = path
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			byName[fd.Name.Name] = append(byName[fd.Name.Name], funcDecl{fd, imports, isTest})
			if isTest && fd.Recv == nil && isTestName(fd.Name.Name) {
				tests = append(tests, funcDecl{fd, imports, true})
			}
		}
		return nil
	}
	for _, name := range goFiles {
		if err := parse(name, false); err != nil {
			return nil, err
		}
	}
	for _, name := range testFiles {
		if err := parse(name, true); err != nil {
			return nil, err
		}
	}
	out := make([]testFunc, 0, len(tests))
	for _, t := range tests {
		out = append(out, testFunc{Name: t.decl.Name.Name, Reason: reason(t, byName)})
	}
	slices.SortFunc(out, func(a, b testFunc) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func isTestName(name string) bool {
	if !strings.HasPrefix(name, "Test") || name == "TestMain" {
		return false
	}
	rest := name[len("Test"):]
	return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
}

// reason walks fn and what it calls in its package, and returns the first
// timing-dependent use it meets, or "".
func reason(fn funcDecl, byName map[string][]funcDecl) string {
	seen := map[*ast.FuncDecl]bool{}
	queue := []funcDecl{fn}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		if seen[f.decl] {
			continue
		}
		seen[f.decl] = true
		found := ""
		ast.Inspect(f.decl.Body, func(n ast.Node) bool {
			if found != "" {
				return false
			}
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok {
					if path, ok := f.imports[id.Name]; ok {
						found = qualified(path, n.Sel.Name, f.test)
						return false // another package's name: not followed
					}
				}
			case *ast.Ident: // a call, a method value, a func value: followed
				queue = append(queue, byName[n.Name]...)
			}
			return true
		})
		if found != "" {
			return found
		}
	}
	return ""
}

// qualified returns why path.name makes a test timing-dependent, or "".
// A context deadline counts in test code only: the code under test sets
// its own, and what it waits on is what matters.
func qualified(path, name string, inTest bool) string {
	for suffix, what := range serverPackages {
		if strings.HasSuffix(path, "/"+suffix) {
			return "starts a " + what + " (" + filepath.Base(path) + "." + name + ")"
		}
	}
	if slices.Contains(serverCalls[path], name) {
		return "starts a server or process (" + filepath.Base(path) + "." + name + ")"
	}
	if slices.Contains(waitCalls[path], name) && (inTest || path != "context") {
		return "waits on time (" + filepath.Base(path) + "." + name + ")"
	}
	return ""
}

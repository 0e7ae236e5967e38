package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// After an intended change of the exported API:
//
//	go test ./internal/apicheck -update
//
// rewrites api/*.txt at the module root (and the clean fixture's record);
// review the diff and commit it with the change.
var update = flag.Bool("update", false, "rewrite the recorded API files (api/*.txt) from the source")

// TestModuleAPI is the check itself: every public package of this module has
// its exported API recorded in api/, and no exported declaration names a type
// from an internal package.
func TestModuleAPI(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	checkModule(t, root, *update)
}

// checkModule runs both checks on the module at root, or rewrites its api/
// when update is set.
func checkModule(t *testing.T, root string, update bool) {
	t.Helper()
	modPath, err := ModulePath(root)
	if err != nil {
		t.Fatal(err)
	}
	apis, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range apis {
		for _, l := range api.Leaks {
			t.Errorf("%v: a user outside the module cannot name that type; export it from a public package, or unexport the declaration", l)
		}
	}
	apiDir := filepath.Join(root, "api")
	if update {
		if err := Write(apiDir, modPath, apis); err != nil {
			t.Fatal(err)
		}
		return
	}
	problems, err := Compare(apiDir, modPath, apis)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// fixture copies testdata/<name> into a temporary directory and makes it a
// module (a go.mod in testdata would cut it out of this module's zip). A
// directory named nested becomes a module of its own.
func fixture(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", name)
	err := os.CopyFS(dst, os.DirFS(src))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst, "go.mod"), "module example.com/"+name+"\n\ngo 1.26\n")
	if _, err := os.Stat(filepath.Join(dst, "nested")); err == nil {
		writeFile(t, filepath.Join(dst, "nested", "go.mod"), "module example.com/nested\n\ngo 1.26\n")
	}
	// The go command in the fixture must not see a workspace of the caller's.
	t.Setenv("GOWORK", "off")
	return dst
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, root string) []API {
	t.Helper()
	apis, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	return apis
}

func compare(t *testing.T, root string, apis []API) []string {
	t.Helper()
	modPath, err := ModulePath(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Compare(filepath.Join(root, "api"), modPath, apis)
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// TestFixtureMatchesItsRecord renders a throwaway module with one
// declaration of each kind and compares it with testdata/clean/api, which
// doubles as the reference of the format. Only its two public packages are
// found: not internal/, cmd/, a main package elsewhere, a test-only
// package, testdata/, hidden or _ directories, or a nested module.
func TestFixtureMatchesItsRecord(t *testing.T) {
	root := fixture(t, "clean")
	apis := load(t, root)
	var found []string
	for _, api := range apis {
		found = append(found, api.Path)
		for _, l := range api.Leaks {
			t.Errorf("leak reported in the clean fixture: %v", l)
		}
	}
	if diff := cmp.Diff([]string{"example.com/clean", "example.com/clean/shape"}, found); diff != "" {
		t.Errorf("public packages (-want +got):\n%s", diff)
	}
	if *update {
		if err := Write(filepath.Join("testdata", "clean", "api"), "example.com/clean", apis); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, p := range compare(t, root, apis) {
		t.Error(p)
	}
}

func TestChangedSignatureIsReported(t *testing.T) {
	root := fixture(t, "clean")
	src := filepath.Join(root, "shape", "shape.go")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(data),
		"func Scale(s Shape, k float64) Shape { return s }",
		"func Scale(s Shape, k float32) (Shape, error) { return s, nil }", 1)
	if changed == string(data) {
		t.Fatal("the fixture no longer declares Scale as this test expects")
	}
	writeFile(t, src, changed)

	problems := compare(t, root, load(t, root))
	if len(problems) != 1 {
		t.Fatalf("got %d problems, want 1 (the changed Scale):\n%s", len(problems), strings.Join(problems, "\n"))
	}
	for _, want := range []string{
		"the exported API of example.com/clean/shape differs from api/shape.txt",
		"\t- pkg example.com/clean/shape, func Scale(Shape, float64) Shape\n",
		"\t+ pkg example.com/clean/shape, func Scale(Shape, float32) (Shape, error)\n",
		UpdateCommand,
	} {
		if !strings.Contains(problems[0], want) {
			t.Errorf("the report lacks %q:\n%s", want, problems[0])
		}
	}
}

func TestMissingAndStaleFilesAreReported(t *testing.T) {
	root := fixture(t, "clean")
	if err := os.Remove(filepath.Join(root, "api", "shape.txt")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "api", "circle.txt"), "pkg example.com/clean/circle, func Area() float64\n")

	problems := compare(t, root, load(t, root))
	want := []string{
		"api/shape.txt is missing: example.com/clean/shape is a public package and its exported API is not recorded; write it with\n\t" + UpdateCommand + "\nand commit api/shape.txt",
		"api/circle.txt records no public package of example.com/clean (moved, removed or made internal?); remove it, or run\n\t" + UpdateCommand,
	}
	if diff := cmp.Diff(want, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// TestUpdateRewritesTheRecord: what Write records, Compare accepts, and a
// file of a package that is gone is removed.
func TestUpdateRewritesTheRecord(t *testing.T) {
	root := fixture(t, "clean")
	apiDir := filepath.Join(root, "api")
	writeFile(t, filepath.Join(apiDir, "shape.txt"), "pkg example.com/clean/shape, func Old()\n")
	writeFile(t, filepath.Join(apiDir, "circle.txt"), "pkg example.com/clean/circle, func Area() float64\n")
	apis := load(t, root)
	if err := Write(apiDir, "example.com/clean", apis); err != nil {
		t.Fatal(err)
	}
	if problems := compare(t, root, apis); len(problems) > 0 {
		t.Errorf("after Write, Compare reports:\n%s", strings.Join(problems, "\n"))
	}
	if _, err := os.Stat(filepath.Join(apiDir, "circle.txt")); !os.IsNotExist(err) {
		t.Errorf("circle.txt of a package that is gone: got %v, want it removed", err)
	}
}

// TestNoPublicPackages: a module whose packages are all internal or
// commands passes with nothing recorded, and an update writes nothing.
func TestNoPublicPackages(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "go.mod"), "module example.com/none\n\ngo 1.26\n")
	writeFile(t, filepath.Join(root, "internal", "core", "core.go"), "package core\n\nfunc Exported() {}\n")
	writeFile(t, filepath.Join(root, "cmd", "tool", "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(root, "only_test.go"), "package none\n")

	checkModule(t, root, false)
	checkModule(t, root, true)
	if _, err := os.Stat(filepath.Join(root, "api")); !os.IsNotExist(err) {
		t.Errorf("api/ after an update with no public package: got %v, want no directory", err)
	}

	// The last public package made internal: its file goes, and api/ with it.
	writeFile(t, filepath.Join(root, "api", "core.txt"), "pkg example.com/none/core, func Exported()\n")
	checkModule(t, root, true)
	if _, err := os.Stat(filepath.Join(root, "api")); !os.IsNotExist(err) {
		t.Errorf("api/ after an update removed its last file: got %v, want no directory", err)
	}
}

// TestInternalNamesAreReported: every exported declaration of the leaky
// fixture that names its internal package is reported, named by its line,
// and none of the unexported uses is.
func TestInternalNamesAreReported(t *testing.T) {
	root := fixture(t, "leaky")
	var got []string
	for _, api := range load(t, root) {
		for _, l := range api.Leaks {
			if diff := cmp.Diff([]string{"example.com/leaky/internal/idem"}, l.Internal); diff != "" {
				t.Errorf("%s: internal packages (-want +got):\n%s", l.Decl, diff)
			}
			if !strings.HasSuffix(strings.SplitN(l.Pos, ":", 2)[0], ".go") {
				t.Errorf("%s: position %q names no Go file", l.Decl, l.Pos)
			}
			got = append(got, l.Decl)
		}
	}
	const idem = "example.com/leaky/internal/idem"
	want := []string{
		// a const's type
		"pkg example.com/leaky, const Done " + idem + ".Code = \"done\"",
		// a function's result, a generic constraint, a public alias that stands for an internal type
		"pkg example.com/leaky, func Get(string) (" + idem + ".Record, error)",
		"pkg example.com/leaky, func Reduce[T interface{ ~[]" + idem + ".Code }](T)",
		"pkg example.com/leaky, func Via(example.com/leaky/alias.R)",
		// methods, one promoted from an embedded internal type
		"pkg example.com/leaky, method (*Engine) Code() map[string][]" + idem + ".Code",
		"pkg example.com/leaky, method (Wrapper) Run() " + idem + ".Record",
		// an interface method, through the public alias
		"pkg example.com/leaky, type Getter interface, Lookup(context.Context) (example.com/leaky/alias.R, error)",
		// a struct field
		"pkg example.com/leaky, type Options struct, Store " + idem + ".Store",
		// a type alias
		"pkg example.com/leaky, type Record = " + idem + ".Record",
		// an interface embedding an internal one, and the method it brings
		"pkg example.com/leaky, type Store interface { Get }",
		"pkg example.com/leaky, type Store interface, Get(context.Context, string) (" + idem + ".Record, error)",
		// an embedded field
		"pkg example.com/leaky, type Wrapper struct, embedded *" + idem + ".Engine",
		// an inferred var's type
		"pkg example.com/leaky, var Default *" + idem + ".Engine",
		// a type alias in another public package
		"pkg example.com/leaky/alias, type R = " + idem + ".Record",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("leaks (-want +got):\n%s", diff)
	}
}

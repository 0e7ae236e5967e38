// Package apicheck records the exported API of this module's public packages
// in files that a test compares, as the Go project keeps api/*.txt, and finds
// exported declarations that name a type from an internal package (a user
// outside the module could call them but never name what they take or
// return).
//
// It is for this module's own tests (apicheck_test.go), not for users. The
// recorded files are api/<dir>.txt at the module root, one per public
// package: api/oncely.txt for the root package, api/driver.txt for ./driver,
// api/a-b.txt for ./a/b. After an intended change of the exported API,
// rewrite them and commit the diff with the change:
//
//	go test ./internal/apicheck -update
//
// TestModuleAPI fails on a package whose file is missing or differs, on a
// file whose package is gone, and on an exported declaration that names an
// internal package. A module with no public package records nothing: no
// api/ directory.
//
// A public package is a directory of the module with non-test Go files whose
// import path has no internal element, that is not under the root's cmd/,
// testdata/, vendor/ or a directory whose name starts with "." or "_", not in
// a nested module, and whose package is not main (a command has no
// importable API).
//
// Each line of a file is one exported declaration, in the spirit of cmd/api:
//
//	pkg example.com/m, const Max untyped int = 128
//	pkg example.com/m, func New(Store, Options) (*Engine, error)
//	pkg example.com/m, method (*Engine) Run(context.Context, Request) Outcome
//	pkg example.com/m, type Options struct, Retry RetryPolicy
//	pkg example.com/m, type Store interface { Get, Put }
//	pkg example.com/m, type Store interface, Get(context.Context, string) (Record, error)
//
// Types of the package itself are unqualified; every other type is qualified
// by its full import path (log/slog.Logger, example.com/m/driver.Store), so
// that a line says exactly which package it names. Parameter names, struct
// tags and declaration order are not part of the record. Methods are those of
// the type's method set, promoted ones included; fields are the struct's own
// (an embedded field is recorded as "embedded T").
package apicheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// UpdateCommand rewrites the recorded files; the failure messages name it.
const UpdateCommand = "go test ./internal/apicheck -update"

// API is the rendered exported API of one public package.
type API struct {
	Path  string   // import path
	Dir   string   // directory, relative to the module root ("." for the root)
	Lines []string // sorted, one per exported declaration
	Leaks []Leak   // declarations that name a type from an internal package
}

// A Leak is an exported declaration that names a type from an internal
// package.
type Leak struct {
	Pos      string   // file:line of the package-level declaration, relative to the module root
	Decl     string   // its line in the API file
	Internal []string // the internal packages it names, sorted
}

func (l Leak) String() string {
	return fmt.Sprintf("%s: %s names internal package %s", l.Pos, l.Decl, strings.Join(l.Internal, ", "))
}

// Load finds the public packages of the module rooted at root, type-checks
// them from source and renders their exported API. A module with no public
// package gives an empty result and runs no go command.
func Load(root string) ([]API, error) {
	modPath, err := ModulePath(root)
	if err != nil {
		return nil, err
	}
	pkgs, err := publicPackages(root, modPath)
	if err != nil || len(pkgs) == 0 {
		return nil, err
	}
	// Imports are read from the compiler's export data, which go list
	// -export builds (or finds in the build cache): far faster than
	// type-checking the standard library from source on every run.
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = p.path
	}
	exports, err := exportData(root, paths)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	apis := make([]API, 0, len(pkgs))
	for _, p := range pkgs {
		api, err := check(fset, imp, root, p)
		if err != nil {
			return nil, err
		}
		apis = append(apis, api)
	}
	return apis, nil
}

// FileName is the recorded file of the package in dir (relative to the
// module root, slash-separated) of the module modPath.
func FileName(modPath, dir string) string {
	if dir == "." {
		return path.Base(modPath) + ".txt"
	}
	return strings.ReplaceAll(dir, "/", "-") + ".txt"
}

// Compare checks apis against the files recorded in apiDir and returns one
// message per difference: a changed API (the lines removed and added), a
// package with no recorded file, a recorded file with no package.
func Compare(apiDir, modPath string, apis []API) ([]string, error) {
	want, err := fileNames(modPath, apis)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, api := range apis {
		name := FileName(modPath, api.Dir)
		rel := filepath.Join(filepath.Base(apiDir), name)
		data, err := os.ReadFile(filepath.Join(apiDir, name))
		if errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s is missing: %s is a public package and its exported API is not recorded; write it with\n\t%s\nand commit %s", rel, api.Path, UpdateCommand, rel))
			continue
		}
		if err != nil {
			return nil, err
		}
		recorded := splitLines(string(data))
		removed, added := diff(recorded, api.Lines)
		if len(removed)+len(added) == 0 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "the exported API of %s differs from %s (-recorded +now):\n", api.Path, rel)
		for _, l := range removed {
			fmt.Fprintf(&b, "\t- %s\n", l)
		}
		for _, l := range added {
			fmt.Fprintf(&b, "\t+ %s\n", l)
		}
		fmt.Fprintf(&b, "if the change is intended, rewrite the file with\n\t%s\nand commit it with the change", UpdateCommand)
		problems = append(problems, b.String())
	}
	stale, err := staleFiles(apiDir, want)
	if err != nil {
		return nil, err
	}
	for _, name := range stale {
		rel := filepath.Join(filepath.Base(apiDir), name)
		problems = append(problems, fmt.Sprintf("%s records no public package of %s (moved, removed or made internal?); remove it, or run\n\t%s", rel, modPath, UpdateCommand))
	}
	return problems, nil
}

// Write records apis in apiDir and removes the files of packages that are
// gone. With no public package it creates nothing, and removes apiDir if it
// removed its last file.
func Write(apiDir, modPath string, apis []API) error {
	want, err := fileNames(modPath, apis)
	if err != nil {
		return err
	}
	stale, err := staleFiles(apiDir, want)
	if err != nil {
		return err
	}
	for _, name := range stale {
		if err := os.Remove(filepath.Join(apiDir, name)); err != nil {
			return err
		}
	}
	if len(apis) == 0 {
		if len(stale) > 0 {
			os.Remove(apiDir) // only if nothing else is in it: fails otherwise
		}
		return nil
	}
	if err := os.MkdirAll(apiDir, 0o755); err != nil {
		return err
	}
	for _, api := range apis {
		var b strings.Builder
		for _, l := range api.Lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		if err := os.WriteFile(filepath.Join(apiDir, FileName(modPath, api.Dir)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ModulePath reads the module path from root/go.mod.
func ModulePath(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
}

type pkgDir struct {
	path  string // import path
	dir   string // relative to the module root, slash-separated
	abs   string
	files []string // non-test Go files for this build context, absolute
}

func publicPackages(root, modPath string) ([]pkgDir, error) {
	ctxt := build.Default
	var pkgs []pkgDir
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil // a symlinked directory (.tools) is not a DirEntry dir: not followed
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "vendor" || name == "internal" || rel == "cmd" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		bp, err := ctxt.ImportDir(p, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if len(bp.GoFiles)+len(bp.CgoFiles) == 0 || bp.Name == "main" {
			return nil // only tests, or a command
		}
		imp := modPath
		if rel != "." {
			imp += "/" + rel
		}
		files := make([]string, 0, len(bp.GoFiles)+len(bp.CgoFiles))
		for _, f := range append(slices.Clip(bp.GoFiles), bp.CgoFiles...) {
			files = append(files, filepath.Join(p, f))
		}
		pkgs = append(pkgs, pkgDir{path: imp, dir: rel, abs: p, files: files})
		return nil
	})
	return pkgs, err
}

// exportData maps every package that paths depend on to its export data
// file.
func exportData(root string, paths []string) (map[string]string, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	m := make(map[string]string)
	for _, line := range splitLines(string(out)) {
		path, file, ok := strings.Cut(line, "=")
		if ok {
			m[path] = file
		}
	}
	return m, nil
}

func check(fset *token.FileSet, imp types.Importer, root string, p pkgDir) (API, error) {
	files := make([]*ast.File, 0, len(p.files))
	for _, name := range p.files {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return API{}, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: imp, FakeImportC: true}
	pkg, err := conf.Check(p.path, fset, files, nil)
	if err != nil {
		return API{}, fmt.Errorf("type-checking %s: %w", p.path, err)
	}
	r := renderer{pkg: pkg, pos: func(obj types.Object) string {
		pos := fset.Position(obj.Pos())
		if rel, err := filepath.Rel(root, pos.Filename); err == nil {
			pos.Filename = filepath.ToSlash(rel)
		}
		return fmt.Sprintf("%s:%d", pos.Filename, pos.Line)
	}}
	r.render()
	slices.Sort(r.lines)
	r.lines = slices.Compact(r.lines)
	slices.SortFunc(r.leaks, func(a, b Leak) int { return strings.Compare(a.Decl, b.Decl) })
	return API{Path: p.path, Dir: p.dir, Lines: r.lines, Leaks: r.leaks}, nil
}

// renderer writes the API lines of one package and notes the internal
// packages each line names.
type renderer struct {
	pkg   *types.Package
	pos   func(types.Object) string
	lines []string
	leaks []Leak
}

func (r *renderer) render() {
	scope := r.pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			r.decl(obj, func(w *typeWriter) {
				fmt.Fprintf(w, "const %s ", obj.Name())
				w.typ(obj.Type())
				fmt.Fprintf(w, " = %s", obj.Val().ExactString())
			})
		case *types.Var:
			r.decl(obj, func(w *typeWriter) {
				fmt.Fprintf(w, "var %s ", obj.Name())
				w.typ(obj.Type())
			})
		case *types.Func:
			r.decl(obj, func(w *typeWriter) {
				sig := obj.Type().(*types.Signature)
				fmt.Fprintf(w, "func %s", obj.Name())
				w.typeParams(sig.TypeParams())
				w.signature(sig)
			})
		case *types.TypeName:
			r.typeName(obj)
		}
	}
}

// decl renders one line; the leak, if any, is reported at obj.
func (r *renderer) decl(obj types.Object, write func(*typeWriter)) {
	w := &typeWriter{pkg: r.pkg, internal: map[string]bool{}}
	fmt.Fprintf(w, "pkg %s, ", r.pkg.Path())
	write(w)
	line := w.String()
	r.lines = append(r.lines, line)
	if len(w.internal) > 0 {
		r.leaks = append(r.leaks, Leak{Pos: r.pos(obj), Decl: line, Internal: sortedKeys(w.internal)})
	}
}

func (r *renderer) typeName(obj *types.TypeName) {
	if alias, ok := obj.Type().(*types.Alias); ok {
		r.decl(obj, func(w *typeWriter) {
			fmt.Fprintf(w, "type %s", obj.Name())
			w.typeParams(alias.TypeParams())
			w.WriteString(" = ")
			w.typ(alias.Rhs())
		})
		return
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return
	}
	// head is "type T[P any]", the start of every line about T.
	head := func(w *typeWriter) {
		fmt.Fprintf(w, "type %s", obj.Name())
		w.typeParams(named.TypeParams())
	}
	switch u := named.Underlying().(type) {
	case *types.Struct:
		r.decl(obj, func(w *typeWriter) { head(w); w.WriteString(" struct") })
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			r.decl(obj, func(w *typeWriter) {
				head(w)
				w.WriteString(" struct, ")
				if f.Embedded() {
					w.WriteString("embedded ")
				} else {
					fmt.Fprintf(w, "%s ", f.Name())
				}
				w.typ(f.Type())
			})
		}
	case *types.Interface:
		if !u.IsMethodSet() {
			// A constraint: its type set is the API.
			r.decl(obj, func(w *typeWriter) { head(w); w.WriteString(" interface { "); w.interfaceBody(u); w.WriteString(" }") })
			return
		}
		r.decl(obj, func(w *typeWriter) {
			head(w)
			w.WriteString(" interface { ")
			var names []string
			unexported := false
			for i := range u.NumMethods() {
				if m := u.Method(i); m.Exported() {
					names = append(names, m.Name())
				} else {
					unexported = true
				}
			}
			if unexported {
				// Nobody outside the package can implement it.
				names = append(names, "unexported methods")
			}
			w.WriteString(strings.Join(names, ", "))
			w.WriteString(" }")
			// An embedded interface from an internal package is shown
			// by godoc though a user cannot follow it.
			for i := range u.NumEmbeddeds() {
				w.walk(u.EmbeddedType(i))
			}
		})
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				continue
			}
			r.decl(obj, func(w *typeWriter) {
				head(w)
				fmt.Fprintf(w, " interface, %s", m.Name())
				w.signature(m.Type().(*types.Signature))
			})
		}
		return
	default:
		r.decl(obj, func(w *typeWriter) { head(w); w.WriteByte(' '); w.typ(u) })
	}
	r.methods(obj, named)
}

// methods renders the exported methods of T's method set (promoted ones
// included), each with the receiver it needs: T when T's method set has it,
// *T when only *T's does.
func (r *renderer) methods(obj *types.TypeName, named *types.Named) {
	valueSet := types.NewMethodSet(named)
	ptrSet := types.NewMethodSet(types.NewPointer(named))
	recv := obj.Name()
	if tps := named.TypeParams(); tps.Len() > 0 {
		names := make([]string, tps.Len())
		for i := range tps.Len() {
			names[i] = tps.At(i).Obj().Name()
		}
		recv += "[" + strings.Join(names, ", ") + "]"
	}
	for i := range ptrSet.Len() {
		sel := ptrSet.At(i)
		m := sel.Obj()
		if !m.Exported() {
			continue
		}
		rcv := "*" + recv
		if valueSet.Lookup(m.Pkg(), m.Name()) != nil {
			rcv = recv
		}
		r.decl(obj, func(w *typeWriter) {
			fmt.Fprintf(w, "method (%s) %s", rcv, m.Name())
			w.signature(sel.Type().(*types.Signature))
		})
	}
}

// typeWriter writes types with parameter names left out, qualifies every
// type from another package by its import path, and notes every internal
// package it names, including those behind an alias.
type typeWriter struct {
	strings.Builder
	pkg      *types.Package
	internal map[string]bool
	silent   bool // walking an alias target: note, do not write
}

func (w *typeWriter) WriteString(s string) (int, error) {
	if w.silent {
		return len(s), nil
	}
	return w.Builder.WriteString(s)
}

func (w *typeWriter) Write(p []byte) (int, error) {
	if w.silent {
		return len(p), nil
	}
	return w.Builder.Write(p)
}

func (w *typeWriter) WriteByte(c byte) error {
	if w.silent {
		return nil
	}
	return w.Builder.WriteByte(c)
}

// walk notes the internal packages t names without writing it.
func (w *typeWriter) walk(t types.Type) {
	was := w.silent
	w.silent = true
	w.typ(t)
	w.silent = was
}

func (w *typeWriter) obj(obj types.Object) {
	pkg := obj.Pkg()
	if pkg != nil && pkg != w.pkg {
		if isInternal(pkg.Path()) {
			w.internal[pkg.Path()] = true
		}
		w.WriteString(pkg.Path())
		w.WriteByte('.')
	}
	w.WriteString(obj.Name())
}

func (w *typeWriter) typeList(list *types.TypeList) {
	if list.Len() == 0 {
		return
	}
	w.WriteByte('[')
	for i := range list.Len() {
		if i > 0 {
			w.WriteString(", ")
		}
		w.typ(list.At(i))
	}
	w.WriteByte(']')
}

func (w *typeWriter) typeParams(tps *types.TypeParamList) {
	if tps.Len() == 0 {
		return
	}
	w.WriteByte('[')
	for i := range tps.Len() {
		if i > 0 {
			w.WriteString(", ")
		}
		tp := tps.At(i)
		w.WriteString(tp.Obj().Name())
		w.WriteByte(' ')
		w.typ(tp.Constraint())
	}
	w.WriteByte(']')
}

func (w *typeWriter) typ(t types.Type) {
	switch t := t.(type) {
	case *types.Basic:
		w.WriteString(t.Name())
	case *types.Pointer:
		w.WriteByte('*')
		w.typ(t.Elem())
	case *types.Slice:
		w.WriteString("[]")
		w.typ(t.Elem())
	case *types.Array:
		fmt.Fprintf(w, "[%d]", t.Len())
		w.typ(t.Elem())
	case *types.Map:
		w.WriteString("map[")
		w.typ(t.Key())
		w.WriteByte(']')
		w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendRecv:
			w.WriteString("chan ")
			if e, ok := t.Elem().(*types.Chan); ok && e.Dir() == types.RecvOnly {
				w.WriteByte('(')
				w.typ(e)
				w.WriteByte(')')
				return
			}
		case types.SendOnly:
			w.WriteString("chan<- ")
		case types.RecvOnly:
			w.WriteString("<-chan ")
		}
		w.typ(t.Elem())
	case *types.Signature:
		w.WriteString("func")
		w.signature(t)
	case *types.Struct:
		w.WriteString("struct{")
		for i := range t.NumFields() {
			if i > 0 {
				w.WriteString("; ")
			}
			f := t.Field(i)
			if !f.Embedded() {
				fmt.Fprintf(w, "%s ", f.Name())
			}
			w.typ(f.Type())
		}
		w.WriteByte('}')
	case *types.Interface:
		if t.Empty() {
			w.WriteString("interface{}")
			return
		}
		if t.IsImplicit() {
			// [T ~int | ~string]: the constraint as written.
			w.interfaceBody(t)
			return
		}
		w.WriteString("interface{ ")
		w.interfaceBody(t)
		w.WriteString(" }")
	case *types.Union:
		for i := range t.Len() {
			if i > 0 {
				w.WriteString(" | ")
			}
			term := t.Term(i)
			if term.Tilde() {
				w.WriteByte('~')
			}
			w.typ(term.Type())
		}
	case *types.Named:
		w.obj(t.Obj())
		w.typeList(t.TypeArgs())
	case *types.Alias:
		w.obj(t.Obj())
		w.typeList(t.TypeArgs())
		// An alias in a public package can stand for an internal type.
		w.walk(t.Rhs())
	case *types.TypeParam:
		w.WriteString(t.Obj().Name())
	default:
		w.WriteString(types.TypeString(t, nil))
	}
}

// interfaceBody writes an interface's explicit methods and embedded types
// (a constraint's terms), separated by "; ".
func (w *typeWriter) interfaceBody(t *types.Interface) {
	n := 0
	sep := func() {
		if n > 0 {
			w.WriteString("; ")
		}
		n++
	}
	for i := range t.NumExplicitMethods() {
		sep()
		m := t.ExplicitMethod(i)
		w.WriteString(m.Name())
		w.signature(m.Type().(*types.Signature))
	}
	for i := range t.NumEmbeddeds() {
		sep()
		w.typ(t.EmbeddedType(i))
	}
}

// signature writes "(A, ...B) R" or "(A) (R, error)".
func (w *typeWriter) signature(sig *types.Signature) {
	w.WriteByte('(')
	params := sig.Params()
	for i := range params.Len() {
		if i > 0 {
			w.WriteString(", ")
		}
		t := params.At(i).Type()
		if sig.Variadic() && i == params.Len()-1 {
			w.WriteString("...")
			t = t.(*types.Slice).Elem()
		}
		w.typ(t)
	}
	w.WriteByte(')')
	results := sig.Results()
	switch results.Len() {
	case 0:
	case 1:
		w.WriteByte(' ')
		w.typ(results.At(0).Type())
	default:
		w.WriteString(" (")
		for i := range results.Len() {
			if i > 0 {
				w.WriteString(", ")
			}
			w.typ(results.At(i).Type())
		}
		w.WriteByte(')')
	}
}

// isInternal reports whether path has an internal element, so that only the
// tree around it may import it.
func isInternal(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "internal")
}

func fileNames(modPath string, apis []API) (map[string]bool, error) {
	names := make(map[string]bool, len(apis))
	for _, api := range apis {
		name := FileName(modPath, api.Dir)
		if names[name] {
			return nil, fmt.Errorf("two public packages would be recorded in %s (one is %s): rename a directory", name, api.Path)
		}
		names[name] = true
	}
	return names, nil
}

// staleFiles lists the .txt files of apiDir that record no package in want.
func staleFiles(apiDir string, want map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(apiDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var stale []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, ".txt") && !want[name] {
			stale = append(stale, name)
		}
	}
	return stale, nil
}

// diff returns the lines only in recorded and the lines only in now, each in
// order.
func diff(recorded, now []string) (removed, added []string) {
	in := func(lines []string) map[string]bool {
		m := make(map[string]bool, len(lines))
		for _, l := range lines {
			m[l] = true
		}
		return m
	}
	rec, cur := in(recorded), in(now)
	for _, l := range recorded {
		if !cur[l] {
			removed = append(removed, l)
		}
	}
	for _, l := range now {
		if !rec[l] {
			added = append(added, l)
		}
	}
	return removed, added
}

func splitLines(s string) []string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimRight(l, "\r\n"); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

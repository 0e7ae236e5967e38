package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// markdownFiles are the pages whose links are checked: the README, docs/
// and the generated reports beside them.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "BENCHMARKS.md", "RELIABILITY.md"}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/ has no pages")
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		files = append(files, rel)
	}
	return files
}

// read returns a file of the repository as text.
func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// prose is a page without its fenced code blocks (links there are code).
func prose(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	inlineRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: lower case, markup and
// punctuation dropped, spaces turned into hyphens.
func slug(heading string) string {
	heading = inlineRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors lists a page's heading anchors, numbering repeats as GitHub does.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(prose(text), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP API: `POST /events`":                       "http-api-post-events",
		"Retries: two budgets":                           "retries-two-budgets",
		"What listing costs: a sparse index, not a scan": "what-listing-costs-a-sparse-index-not-a-scan",
		"A [link](x.md) in a heading":                    "a-link-in-a-heading",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinksResolve: every relative link names a file of the repository and,
// with a fragment, a heading of that file.
func TestLinksResolve(t *testing.T) {
	for _, page := range markdownFiles(t) {
		text := read(t, page)
		for _, m := range linkRE.FindAllStringSubmatch(prose(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			rel := page
			if file != "" {
				rel = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", page, target, rel)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(rel, ".md") {
				t.Errorf("%s: link %q: a fragment into a file that is not markdown", page, target)
				continue
			}
			if !anchors(read(t, rel))[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, target, rel, frag)
			}
		}
	}
}

// TestEveryDocsPageIsLinked: a page nobody links to is a page nobody finds.
func TestEveryDocsPageIsLinked(t *testing.T) {
	readme := read(t, "README.md")
	for _, page := range markdownFiles(t) {
		if !strings.HasPrefix(page, "docs"+string(filepath.Separator)) {
			continue
		}
		if !strings.Contains(readme, "]("+filepath.ToSlash(page)+")") {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

func TestReadmeFitsAFewScreens(t *testing.T) {
	if n := strings.Count(read(t, "README.md"), "\n"); n > 150 {
		t.Errorf("README.md has %d lines, want at most 150: move the detail into docs/", n)
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(read(t, "README.md"), cmd) {
			t.Errorf("README.md does not show %q", cmd)
		}
	}
}

// envRead is an environment variable the code reads, and where.
type envRead struct {
	name, file string
	shipped    bool
}

// shipped says whether a Go file is linked into a binary we ship (the
// function or oncelyctl): not test support, not a local tool, not a test.
func shipped(rel string) bool {
	rel = filepath.ToSlash(rel)
	if strings.HasSuffix(rel, "_test.go") {
		return false
	}
	for _, p := range []string{"cmd/handler/", "cmd/oncelyctl/"} {
		if strings.HasPrefix(rel, p) {
			return !strings.HasSuffix(rel, "profile.go") // -tags benchprofile only
		}
	}
	return strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "internal/testing/") &&
		!strings.HasPrefix(rel, "internal/e2e/") && !strings.HasPrefix(rel, "internal/deploy/")
}

// envReads finds every variable the Go code reads: the values of constants
// named Env*, and the names given to Getenv, getenv and LookupEnv (string
// literals, or constants of the module).
func envReads(t *testing.T) []envRead {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	consts := map[string]string{} // Name -> value, for every string constant
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[rel] = f
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	envName := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	// Variables a test sets for the child processes it starts ("NAME=" in
	// a literal, or Setenv) are its own wiring, not settings.
	setByCode := map[string]bool{}
	assign := regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					if m := assign.FindStringSubmatch(v); m != nil {
						setByCode[m[1]] = true
					}
				}
			}
			return true
		})
	}
	var out []envRead
	add := func(name, file string) {
		if envName.MatchString(name) && (shipped(file) || !setByCode[name]) {
			out = append(out, envRead{name, file, shipped(file)})
		}
	}
	value := func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				v, err := strconv.Unquote(e.Value)
				return v, err == nil
			}
		case *ast.Ident:
			v, ok := consts[e.Name]
			return v, ok
		case *ast.SelectorExpr:
			v, ok := consts[e.Sel.Name]
			return v, ok
		}
		return "", false
	}
	for rel, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if strings.HasPrefix(name.Name, "Env") && i < len(n.Values) {
						if v, ok := value(n.Values[i]); ok {
							add(v, rel)
						}
					}
				}
			case *ast.CallExpr:
				var fn string
				switch f := n.Fun.(type) {
				case *ast.Ident:
					fn = f.Name
				case *ast.SelectorExpr:
					fn = f.Sel.Name
				}
				if (fn == "Getenv" || fn == "getenv" || fn == "LookupEnv") && len(n.Args) == 1 {
					if v, ok := value(n.Args[0]); ok {
						add(v, rel)
					}
				}
			}
			return true
		})
	}
	return out
}

// TestEveryVariableIsDocumented: the function's and oncelyctl's variables
// are in the configuration page; local tools' and tests' variables are on
// some page.
func TestEveryVariableIsDocumented(t *testing.T) {
	config := read(t, filepath.Join("docs", "configuration.md"))
	var all strings.Builder
	for _, page := range markdownFiles(t) {
		all.WriteString(read(t, page))
	}
	reads := envReads(t)
	if len(reads) < 20 {
		t.Fatalf("found only %d variable reads: the scan is broken", len(reads))
	}
	seen := map[string]bool{}
	for _, r := range reads {
		key := r.name + strconv.FormatBool(r.shipped)
		if seen[key] {
			continue
		}
		seen[key] = true
		word := regexp.MustCompile(`\b` + r.name + `\b`)
		switch {
		case r.shipped && !word.MatchString(config):
			t.Errorf("%s reads %s: docs/configuration.md does not name it", r.file, r.name)
		case !r.shipped && !word.MatchString(all.String()):
			t.Errorf("%s reads %s: no page of README.md or docs/ names it", r.file, r.name)
		}
	}
}

// makeTargets lists the targets defined in the Makefile and mk/*.mk.
func makeTargets(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "mk", "*.mk"))
	files = append(files, filepath.Join(root, "Makefile"))
	target := regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9_-]*):([^=]|$)`)
	var out []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if m := target.FindStringSubmatch(sc.Text()); m != nil {
				out = append(out, m[1])
			}
		}
		fh.Close()
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestEveryMakeTargetIsListed: each target appears as `make <target>` on a
// page.
func TestEveryMakeTargetIsListed(t *testing.T) {
	var all strings.Builder
	for _, page := range markdownFiles(t) {
		all.WriteString(read(t, page))
	}
	targets := makeTargets(t)
	if !slices.Contains(targets, "test") || !slices.Contains(targets, "demo") {
		t.Fatalf("targets %v lack test or demo: the scan is broken", targets)
	}
	for _, target := range targets {
		if !regexp.MustCompile(`make ` + regexp.QuoteMeta(target) + `\b`).MatchString(all.String()) {
			t.Errorf("make %s is not listed on any page (docs/local.md lists the targets)", target)
		}
	}
}

package router_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestTheProductRunsOnThePublicAdapters: the ready function is the
// library's first user. Its wiring (cmd/handler, which reaches the
// adapters through this package) builds its queue path on the public
// sqsbatch and keyexpr, not on internal copies of them.
func TestTheProductRunsOnThePublicAdapters(t *testing.T) {
	deps := goListDeps(t, "github.com/oncely/oncely/cmd/handler", "github.com/oncely/oncely/internal/router")
	for _, banned := range []string{"github.com/oncely/oncely/internal/sqsbatch", "github.com/oncely/oncely/internal/eventkey", "github.com/oncely/oncely/internal/httpapi"} {
		if slices.Contains(deps, banned) {
			t.Errorf("the product's wiring depends on %s; it must use the public packages", banned)
		}
	}
	for _, public := range []string{"github.com/oncely/oncely/sqsbatch", "github.com/oncely/oncely/keyexpr", "github.com/oncely/oncely/apigw"} {
		if !slices.Contains(deps, public) {
			t.Errorf("the product's wiring does not use %s", public)
		}
	}
}

// The product's wiring (cmd/handler, and this package, which it reaches
// the adapters through) imports the library's public packages, not the
// domain, the DynamoDB driver or internal adapters, in the production
// build: what it builds, a team can build. (Its actions, internal/notify
// and internal/ledger, and the e2efaults build, may reach further.)
func TestTheProductWiringImportsNoInternalCore(t *testing.T) {
	banned := []string{"internal/idem", "internal/ddbstore", "internal/sqsbatch", "internal/httpapi", "internal/eventkey"}
	for _, pkg := range []string{"github.com/oncely/oncely/cmd/handler", "github.com/oncely/oncely/internal/router"} {
		for _, imp := range goList(t, "{{join .Imports \"\\n\"}}", pkg) {
			for _, b := range banned {
				if imp == "github.com/oncely/oncely/"+b {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
}

// oncelyctl names API records with the public scope grammar (apigw), not
// through the ready function's API routes.
func TestOncelyctlDoesNotDependOnTheAPIRoutes(t *testing.T) {
	deps := goListDeps(t, "github.com/oncely/oncely/internal/opsctl")
	for _, banned := range []string{"github.com/oncely/oncely/internal/eventsapi", "github.com/oncely/oncely/internal/receiving", "github.com/oncely/oncely/internal/httpapi"} {
		if slices.Contains(deps, banned) {
			t.Errorf("internal/opsctl depends on %s", banned)
		}
	}
}

// goListDeps returns the packages pkgs depend on in the production build
// (no test files, no build tags), themselves included.
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return goList(t, "{{.ImportPath}}", append([]string{"-deps"}, pkgs...)...)
}

// goList runs go list -f format over args.
func goList(t *testing.T, format string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-f", format}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Fields(string(out))
}

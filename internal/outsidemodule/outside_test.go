// Package outsidemodule holds the test that uses oncely as a stranger
// would: from a module of its own, through the published packages only.
package outsidemodule

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The tests the outside module must run and pass. A name missing from the
// output fails this test as surely as a failure does: a test that does not
// run proves nothing.
var mustPass = []string{
	// storetest.Run runs a capability's tests only when the harness declares it
	"TestConformance/Store", "TestConformance/Store/ErrorsAreClassified/drop_reply",
	"TestConformance/Poison", "TestConformance/Effects",
	"TestEngineCommitsEffectsThroughTheOutsideStore",
	"TestSQSBatchFromOutside", "TestSQSBatchWithKeyExpressionsFromOutside", "TestAPIGatewayFromOutside",
	"TestEngineStoresAFailedEffectConditionAsPermanent",
	"TestHandlerNotesPoisonInTheOutsideStore",
	"TestOneRunThenAReplay/Do", "TestOneRunThenAReplay/Wrap",
	"TestAReusedKeyIsRefused/Do", "TestAReusedKeyIsRefused/Wrap",
	"TestAMarkedTransientErrorLeavesTheKeyFree/Do", "TestAMarkedTransientErrorLeavesTheKeyFree/Wrap",
	"TestAPermanentFailureIsReplayedWithoutRunning/Do", "TestAPermanentFailureIsReplayedWithoutRunning/Wrap",
}

// TestAModuleOutsideUsesThePublicAPI writes testdata/outside into a
// temporary directory as a module of its own, which requires this one
// through a replace to the checkout, and runs its tests: its own store
// passes storetest.Run with every capability declared (classification,
// poison notes, effects), the engine commits effects through that store and
// the module's handler notes poison in it, and with oncelytest Do and Wrap
// run once and replay, refuse a reused key, leave the key free after a
// marked transient error, and replay a permanent failure without running;
// the public SQS adapter runs its own event type once per key, with the JSON
// decoder and with keyexpr's, and notes poison in its store; the public
// API Gateway adapter replays a retry and keeps two callers apart.
// An internal package cannot be imported from there: the go command
// refuses it, so the module shows what a user can build.
func TestAModuleOutsideUsesThePublicAPI(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: the outside module cannot be built")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyTree(t, filepath.Join("testdata", "outside"), dir)
	goMod := "module example.com/outside\n\ngo 1.26\n\nrequire github.com/oncely/oncely v0.0.0\n\nreplace github.com/oncely/oncely => " + root + "\n"
	writeFile(t, filepath.Join(dir, "go.mod"), goMod)
	// oncely's own sums: the outside module needs a subset of its
	// dependencies, so nothing new is downloaded.
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.sum"), string(sums))

	cmd := exec.CommandContext(t.Context(), goBin, "test", "-count=1", "-v", "./...")
	cmd.Dir = dir
	// -mod=mod lets the go command complete go.mod's requirements from
	// oncely's; GOWORK=off keeps a workspace above the temporary directory
	// out; GOPROXY and the caches come from the environment.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test ./... in the outside module: %v\n%s", err, out)
	}
	passed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*--- PASS: (\S+)`).FindAllStringSubmatch(string(out), -1) {
		passed[m[1]] = true
	}
	for _, name := range mustPass {
		if !passed[name] {
			t.Errorf("%s did not pass in the outside module", name)
		}
	}
	// Every capability of the harness ran: no part of the suite was
	// skipped for want of one.
	if skipped := regexp.MustCompile(`(?m)^\s*--- SKIP: TestConformance\S*`).FindAllString(string(out), -1); len(skipped) > 0 {
		t.Errorf("parts of the conformance suite were skipped:\n%s", strings.Join(skipped, "\n"))
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "ok ") {
			t.Log(line) // which packages ran
		}
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

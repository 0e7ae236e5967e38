// Package examples drives the functions of the examples module (examples/,
// a module of its own that imports this one through a replace, as a team's
// module would through its go.mod): each is built as a Lambda bootstrap
// and run under the Runtime Interface Emulator against a local DynamoDB
// (and the queue consumers through a local queue and event source
// mapping). The local servers' helpers are this module's, so the tests
// live here. This file holds what every example is checked for: its
// wiring's size and its template's grants.
package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/sqsbatch"

	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/samtemplate"
)

// envRIE names the emulator binary (make sets it; see docs/local.md).
const envRIE = "IDEM_TEST_RIE"

// examplesDir is the examples module, from this package's directory.
var examplesDir = filepath.Join("..", "..", "examples")

// TestWiringFitsInTenStatements: an example's main package is what a team
// copies, so its wiring stays small: the statements of func main (the
// business logic and its event, below main's comment line, are the
// team's own) are at most ten, in every example.
func TestWiringFitsInTenStatements(t *testing.T) {
	mains, err := filepath.Glob(filepath.Join(examplesDir, "*", "main.go"))
	if err != nil || len(mains) == 0 {
		t.Fatalf("no examples/*/main.go (%v)", err)
	}
	for _, path := range mains {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			if n := mainStatements(t, path); n > 10 {
				t.Errorf("func main has %d statements; want at most 10: the wiring a team copies", n)
			}
		})
	}
}

// mainStatements counts the statements of path's func main, blocks aside
// (an if and the call in its block are two).
func mainStatements(t *testing.T, path string) int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var main *ast.FuncDecl
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "main" && fd.Recv == nil {
			main = fd
		}
	}
	if main == nil {
		t.Fatalf("%s has no func main", path)
	}
	n := 0
	ast.Inspect(main.Body, func(node ast.Node) bool {
		switch node.(type) {
		case *ast.BlockStmt:
		case ast.Stmt:
			n++
		}
		return true
	})
	return n
}

// TestTemplatesGrantWhatTheFunctionsCall: each example's role may call
// exactly what the libraries it uses name, each on its own resource:
// dynamostore.RequiredIAMActions() on the idempotency table, and for a
// queue consumer with per-message backoff sqs:ChangeMessageVisibility on
// its queue (SAM adds what the event source mapping itself needs). The
// table follows the store's contract (its key and TTL attributes), and a
// queue consumer reports batch item failures and has a dead-letter queue.
func TestTemplatesGrantWhatTheFunctionsCall(t *testing.T) {
	for _, tc := range []struct {
		example string
		// want: the actions granted, by the logical id of the resource.
		want map[string][]string
	}{
		{"welcome", map[string][]string{"IdempotencyTable": dynamostore.RequiredIAMActions()}},
		{"orders", map[string][]string{"IdempotencyTable": dynamostore.RequiredIAMActions(), "OrdersQueue": sqsbatch.RequiredIAMActions()}},
		{"orders-api", map[string][]string{"IdempotencyTable": dynamostore.RequiredIAMActions()}},
	} {
		t.Run(tc.example, func(t *testing.T) {
			path := filepath.Join(examplesDir, tc.example, "template.yaml")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var tpl struct {
				Resources map[string]struct {
					Type       string    `yaml:"Type"`
					Properties yaml.Node `yaml:"Properties"`
				} `yaml:"Resources"`
			}
			if err := yaml.Unmarshal(raw, &tpl); err != nil {
				t.Fatal(err)
			}
			granted := map[string][]string{}
			tables := 0
			for name, r := range tpl.Resources {
				switch r.Type {
				case "AWS::DynamoDB::Table":
					tables++
					checkTableContract(t, name, &r.Properties)
				case "AWS::Serverless::Function":
					for res, actions := range grants(t, name, &r.Properties) {
						granted[res] = append(granted[res], actions...)
					}
				}
			}
			if tables != 1 {
				t.Errorf("%d DynamoDB tables; want the one idempotency table", tables)
			}
			for res := range granted {
				slices.Sort(granted[res])
			}
			want := map[string][]string{}
			for res, actions := range tc.want {
				want[res] = slices.Sorted(slices.Values(actions))
			}
			if diff := cmp.Diff(want, granted); diff != "" {
				t.Errorf("the actions the role may call, by resource (-want +got):\n%s", diff)
			}

			// A queue consumer's event sources and queues.
			parsed, err := samtemplate.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range parsed.Sources {
				if !s.ReportBatchItemFailures {
					t.Errorf("%s.Events.%s: no FunctionResponseTypes [ReportBatchItemFailures]: one failed message would send the whole batch back", s.Function, s.Name)
				}
				if q := parsed.Queues[s.Queue]; q.DLQ == "" || q.MaxReceiveCount < 1 {
					t.Errorf("%s: no RedrivePolicy: a message that never succeeds would cycle until its retention ends", s.Queue)
				}
			}
		})
	}
}

// checkTableContract checks a table's key schema and TTL against the
// store's contract.
func checkTableContract(t *testing.T, name string, props *yaml.Node) {
	t.Helper()
	var table struct {
		KeySchema []struct {
			AttributeName string `yaml:"AttributeName"`
			KeyType       string `yaml:"KeyType"`
		} `yaml:"KeySchema"`
		TimeToLiveSpecification struct {
			AttributeName string `yaml:"AttributeName"`
			Enabled       bool   `yaml:"Enabled"`
		} `yaml:"TimeToLiveSpecification"`
	}
	if err := props.Decode(&table); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(table.KeySchema) != 1 || table.KeySchema[0].AttributeName != dynamostore.KeyAttribute || table.KeySchema[0].KeyType != "HASH" {
		t.Errorf("%s: key schema %+v; want one HASH key %q", name, table.KeySchema, dynamostore.KeyAttribute)
	}
	if ttl := table.TimeToLiveSpecification; ttl.AttributeName != dynamostore.TTLAttribute || !ttl.Enabled {
		t.Errorf("%s: TTL %+v; want enabled on %q", name, ttl, dynamostore.TTLAttribute)
	}
}

// grants returns a function's inline policy statements as the actions
// allowed on each resource, named by logical id (a !GetAtt X.Arn), or by
// the literal resource ("*") otherwise.
func grants(t *testing.T, name string, props *yaml.Node) map[string][]string {
	t.Helper()
	var fn struct {
		Policies []struct {
			Statement []struct {
				Effect   string    `yaml:"Effect"`
				Action   yaml.Node `yaml:"Action"`
				Resource yaml.Node `yaml:"Resource"`
			} `yaml:"Statement"`
		} `yaml:"Policies"`
	}
	if err := props.Decode(&fn); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := map[string][]string{}
	for _, p := range fn.Policies {
		for _, st := range p.Statement {
			if st.Effect != "Allow" {
				t.Errorf("%s: a statement with Effect %q; want Allow only", name, st.Effect)
			}
			var actions []string
			for _, a := range samtemplate.Items(&st.Action) {
				actions = append(actions, a.Value)
			}
			for _, r := range samtemplate.Items(&st.Resource) {
				id, attr, ok := samtemplate.GetAtt(r)
				if !ok || attr != "Arn" {
					id = strings.TrimSpace(r.Tag + " " + r.Value)
				}
				out[id] = append(out[id], actions...)
			}
		}
	}
	return out
}

// requireEmulator returns the emulator binary; it skips the test when it
// is not set, unless IDEM_REQUIRE_E2E is (as make does).
func requireEmulator(t *testing.T) string {
	t.Helper()
	emulator := os.Getenv(envRIE)
	if emulator == "" {
		if os.Getenv("IDEM_REQUIRE_E2E") != "" {
			t.Fatalf("%s is not set, and IDEM_REQUIRE_E2E is: the emulator is required", envRIE)
		}
		t.Skipf("%s is not set: make examples (and make test) set it", envRIE)
	}
	return emulator
}

// buildExample builds examples/<name> as a Lambda bootstrap, as sam build
// does (without its arm64), and returns its path.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bootstrap, "./"+name)
	build.Dir = examplesDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s in examples/: %v\n%s", name, err, out)
	}
	return bootstrap
}

// startExample builds examples/<name> and starts it under the emulator
// with dummy credentials, the DynamoDB endpoint ddb and env; the emulator
// stops (and shows its output if the test failed) when the test ends.
func startExample(t *testing.T, name, ddb string, env ...string) *rie.Emulator {
	t.Helper()
	requireEmulator(t)
	return startBootstrap(t, name, buildExample(t, name), ddb, env...)
}

// startBootstrap starts an example's built bootstrap under an emulator of
// its own, as startExample does: two emulators of one bootstrap are two
// execution environments of one function.
func startBootstrap(t *testing.T, name, bootstrap, ddb string, env ...string) *rie.Emulator {
	t.Helper()
	emu, err := rie.Start(rie.Options{RIE: requireEmulator(t), Bootstrap: bootstrap, Env: append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + ddb, "AWS_LAMBDA_FUNCTION_NAME=" + name,
	}, env...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		emu.Stop()
		if t.Failed() {
			t.Logf("%s: emulator and function output:\n%s", name, emu.Log())
		}
	})
	return emu
}

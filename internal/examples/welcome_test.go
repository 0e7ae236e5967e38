// Package examples drives the functions of the examples module (examples/,
// a module of its own that imports this one through a replace, as a team's
// module would through its go.mod): each is built as a Lambda bootstrap
// and run under the Runtime Interface Emulator against a local DynamoDB.
// The local servers' helpers are this module's, so the tests live here.
package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"go.yaml.in/yaml/v3"

	"github.com/oncely/oncely/dynamostore"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/rie"
)

// envRIE names the emulator binary (make sets it; see docs/local.md).
const envRIE = "IDEM_TEST_RIE"

// examplesDir is the examples module, from this package's directory.
var examplesDir = filepath.Join("..", "..", "examples")

// TestWelcomeWiringFitsInTenStatements: the example's main package is what
// a team copies, so its wiring stays small: the statements of package main
// outside the business logic and its event (the functions and types below
// main's comment line) are at most ten.
func TestWelcomeWiringFitsInTenStatements(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(examplesDir, "welcome", "main.go"), nil, 0)
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
		t.Fatal("examples/welcome/main.go has no func main")
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
	if n > 10 {
		t.Errorf("func main has %d statements; want at most 10: the wiring a team copies", n)
	}
}

// welcome is the example function running under the emulator.
type welcome struct {
	emu   *rie.Emulator
	mails atomic.Int64
	mu    sync.Mutex
	reply func(n int64) (int, string) // the mail API's answer to its n-th call
}

func startWelcome(t *testing.T) *welcome {
	t.Helper()
	emulator := os.Getenv(envRIE)
	if emulator == "" {
		if os.Getenv("IDEM_REQUIRE_E2E") != "" {
			t.Fatalf("%s is not set, and IDEM_REQUIRE_E2E is: the emulator is required", envRIE)
		}
		t.Skipf("%s is not set: make examples (and make test) set it", envRIE)
	}
	bootstrap := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bootstrap, "./welcome")
	build.Dir = examplesDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./welcome in examples/: %v\n%s", err, out)
	}
	w := &welcome{reply: func(int64) (int, string) { return 200, `{"messageId":"m-1"}` }}
	mail := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := w.mails.Add(1)
		w.mu.Lock()
		status, body := w.reply(n)
		w.mu.Unlock()
		rw.WriteHeader(status)
		fmt.Fprint(rw, body)
	}))
	t.Cleanup(mail.Close)
	_, ddb := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ddb, nil))
	table := ddblocal.NewTable(t, client)
	emu, err := rie.Start(rie.Options{RIE: emulator, Bootstrap: bootstrap, Env: []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + ddb, "AWS_LAMBDA_FUNCTION_NAME=welcome", "AWS_LAMBDA_FUNCTION_TIMEOUT=10",
		"TABLE_NAME=" + table, "MAIL_API_URL=" + mail.URL,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		emu.Stop()
		if t.Failed() {
			t.Logf("emulator and function output:\n%s", emu.Log())
		}
	})
	w.emu = emu
	return w
}

func (w *welcome) answer(f func(n int64) (int, string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reply = f
}

// invoke sends a user.signed_up event for user (a fresh envelope id each
// time, as EventBridge gives a retry) and returns the function's answer.
func (w *welcome) invoke(t *testing.T, user string) string {
	t.Helper()
	detail, _ := json.Marshal(map[string]string{"userId": user, "email": user + "@example.com"})
	ev := events.EventBridgeEvent{Version: "0", ID: fmt.Sprintf("env-%d", w.mails.Load()) + "-" + user, DetailType: "user.signed_up",
		Source: "com.example.accounts", Region: "us-east-1", Detail: detail}
	payload, _ := json.Marshal(ev)
	out, err := w.emu.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	return string(out)
}

func TestWelcomeUnderTheEmulator(t *testing.T) {
	w := startWelcome(t)

	// The same signup twice (a retried invoke, a second EventBridge
	// delivery): one mail, and the second invoke gets the stored receipt.
	first, again := w.invoke(t, "u-1001"), w.invoke(t, "u-1001")
	if first != `{"messageId":"m-1"}` || again != first || w.mails.Load() != 1 {
		t.Fatalf("twice: %s then %s, %d mails; want the receipt twice and one mail", first, again, w.mails.Load())
	}

	// A marked transient failure (the mail API's 503 on each of the call's
	// three attempts) fails the invoke and leaves the key free: the next
	// invoke (Lambda's retry) mails and succeeds.
	w.answer(func(n int64) (int, string) {
		if n <= 4 {
			return 503, `{"error":"busy"}`
		}
		return 200, fmt.Sprintf(`{"messageId":"m-%d"}`, n)
	})
	if out := w.invoke(t, "u-1002"); !strings.Contains(out, "TRANSIENT_FAILURE") || w.mails.Load() != 4 {
		t.Fatalf("503s: %s after %d mails; want the invoke to fail with TRANSIENT_FAILURE after 3 attempts", out, w.mails.Load())
	}
	if out := w.invoke(t, "u-1002"); out != `{"messageId":"m-5"}` || w.mails.Load() != 5 {
		t.Fatalf("the retry after the 503s: %s, %d mails; want it to mail again and succeed", out, w.mails.Load())
	}

	// A permanent failure (the mail API refuses the address) is stored and
	// replayed: the retry does not mail again.
	w.answer(func(int64) (int, string) { return 422, `{"error":"bad address"}` })
	first = w.invoke(t, "u-1003")
	again = w.invoke(t, "u-1003")
	if !strings.Contains(first, "MAIL_REFUSED") || !strings.Contains(again, "MAIL_REFUSED") || w.mails.Load() != 6 {
		t.Fatalf("a refusal: %s then %s, %d mails; want MAIL_REFUSED twice from one mail", first, again, w.mails.Load())
	}
}

// TestWelcomeTemplateGrantsWhatTheStoreNeeds: the example's role may call
// exactly what dynamostore.RequiredIAMActions() names, on its table, and
// the table follows the store's contract (its key and TTL attributes).
func TestWelcomeTemplateGrantsWhatTheStoreNeeds(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(examplesDir, "welcome", "template.yaml"))
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
	var fn struct {
		Policies []struct {
			Statement []struct {
				Action []string `yaml:"Action"`
			} `yaml:"Statement"`
		} `yaml:"Policies"`
	}
	for name, r := range tpl.Resources {
		switch r.Type {
		case "AWS::DynamoDB::Table":
			if err := r.Properties.Decode(&table); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case "AWS::Serverless::Function":
			if err := r.Properties.Decode(&fn); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	if len(table.KeySchema) != 1 || table.KeySchema[0].AttributeName != dynamostore.KeyAttribute || table.KeySchema[0].KeyType != "HASH" {
		t.Errorf("the table's key schema %+v; want one HASH key %q", table.KeySchema, dynamostore.KeyAttribute)
	}
	if ttl := table.TimeToLiveSpecification; ttl.AttributeName != dynamostore.TTLAttribute || !ttl.Enabled {
		t.Errorf("the table's TTL %+v; want enabled on %q", ttl, dynamostore.TTLAttribute)
	}
	var granted []string
	for _, p := range fn.Policies {
		for _, st := range p.Statement {
			granted = append(granted, st.Action...)
		}
	}
	slices.Sort(granted)
	want := slices.Sorted(slices.Values(dynamostore.RequiredIAMActions()))
	if !slices.Equal(granted, want) {
		t.Errorf("the role may call %v; want exactly dynamostore.RequiredIAMActions() %v", granted, want)
	}
}

package opsctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/opsctl"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// now is the operator's clock in every test: records are written relative
// to it, so the output does not depend on when the test runs.
var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fixture is one table with a function's records, and the tool pointed at it.
type fixture struct {
	t        *testing.T
	endpoint string
	client   *dynamodb.Client
	table    string
	admin    *ddbstore.Admin
	vars     map[string]string
	tokens   int
	ops      []string // the AWS operations of the last run (oncelyctl sends one at a time)
}

func newFixture(t *testing.T, endpoint string) *fixture {
	t.Helper()
	client, _ := ddblocal.Client(ddblocal.Config(endpoint, nil))
	table := ddblocal.NewTable(t, client)
	admin, err := ddbstore.NewAdmin(client, table, "shop-notify")
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, endpoint: endpoint, client: client, table: table, admin: admin,
		vars: map[string]string{"IDEMPOTENCY_TABLE": table, "IDEMPOTENCY_NAMESPACE": "shop-notify", "USER": "tester"}}
}

func minidynFixture(t *testing.T) *fixture {
	_, ep := ddblocal.Minidyn(t)
	return newFixture(t, ep)
}

func motoFixture(t *testing.T) *fixture {
	return newFixture(t, ddblocal.MotoEndpoint(t))
}

// run runs oncelyctl and returns its stdout, stderr and exit code. The
// AWS operations it sends are in f.ops.
func (f *fixture) run(stdin string, args ...string) (string, string, int) {
	f.t.Helper()
	var stdout, stderr bytes.Buffer
	f.ops = nil
	code := opsctl.Run(context.Background(), args, opsctl.Env{
		Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return f.vars[k] },
		Now:    func() time.Time { return now },
		AWS: func(context.Context, string, string) (aws.Config, error) {
			return ddblocal.Config(f.endpoint, recorder{f}), nil
		},
		NewToken: func() string { f.tokens++; return fmt.Sprintf("operator-token-%d", f.tokens) },
	})
	return stdout.String(), stderr.String(), code
}

// recorder notes each AWS operation the tool sends.
type recorder struct{ f *fixture }

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.f.ops = append(r.f.ops, ddblocal.Operation(req))
	return http.DefaultTransport.RoundTrip(req)
}

const fp = "3f1d6a4c9b8e7d2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f"

// write puts a record as the engine would: reserved at at (token tok-<key>,
// a lease of lease), then finished by finish (nil: left in progress).
func (f *fixture) write(key string, at time.Time, lease time.Duration, finish func(*idem.Finish)) idem.Record {
	f.t.Helper()
	ctx := context.Background()
	r := idem.Reservation{Key: key, Fingerprint: fp, Token: "tok-" + strings.ReplaceAll(key, ":", "-"), Now: at,
		LeaseUntil: at.Add(lease), ExpiresAt: at.Add(336 * time.Hour)}
	if _, ok, err := f.admin.Reserve(ctx, r); err != nil || !ok {
		f.t.Fatalf("Reserve(%s) = %v, %v", key, ok, err)
	}
	if finish != nil {
		fin := idem.Finish{Key: key, Token: r.Token, Now: at.Add(300 * time.Millisecond), Attempts: 1, ExpiresAt: at.Add(336 * time.Hour)}
		finish(&fin)
		var err error
		if fin.ErrorCode != "" {
			err = f.admin.Fail(ctx, fin)
		} else {
			err = f.admin.Complete(ctx, fin)
		}
		if err != nil {
			f.t.Fatal(err)
		}
	}
	rec, _, err := f.admin.Get(ctx, key, at)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

func failWith(code idem.Code, msg string, retryable bool, attempts int) func(*idem.Finish) {
	return func(f *idem.Finish) {
		f.ErrorCode, f.ErrorMessage, f.Retryable, f.Attempts = code, msg, retryable, attempts
	}
}

func succeed(result string) func(*idem.Finish) {
	return func(f *idem.Finish) { f.Result = []byte(result) }
}

// seedIncident writes the records of the incident of docs/operating.md.
func (f *fixture) seedIncident() {
	f.write("evt:order-1001:refund", now.Add(-10*time.Minute), 30*time.Second, failWith("HTTP_422", `422 from downstream: {"error":"currency missing"}`, false, 1))
	f.write("evt:order-1002:refund", now.Add(-9*time.Minute), 30*time.Second, failWith("HTTP_422", `422 from downstream: {"error":"currency missing"}`, false, 1))
	f.write("evt:order-1003:notify", now.Add(-8*time.Minute), 30*time.Second, succeed(`{"status":202,"body":"{\"received\":true}"}`))
	f.write("evt:order-1004:notify", now.Add(-7*time.Minute), 30*time.Second, failWith(idem.CodeTransientFailure, "503 from downstream", true, 3))
	f.write("evt:order-1005:notify", now.Add(-10*time.Second), time.Minute, nil)   // running
	f.write("evt:order-1006:notify", now.Add(-2*time.Minute), 30*time.Second, nil) // abandoned
	f.write("evt:order-1007:notify", now.Add(-6*time.Minute), 30*time.Second, failWith(idem.CodeRetryExhausted, "5 attempts used; last error: 503", false, 5))
	if err := f.admin.RecordPoison(context.Background(), idem.Poison{ID: "9f0c2d4e-0001", Reason: idem.CodeNotJSON, Detail: "the body is not JSON: syntax error at byte 1",
		BodySHA256: fp, BodySize: 17, At: now.Add(-5 * time.Minute), ExpiresAt: now.Add(335 * time.Hour)}); err != nil {
		f.t.Fatal(err)
	}
	// A corrected copy of order-1003's notification: the note names the key.
	if err := f.admin.RecordPoison(context.Background(), idem.Poison{ID: "9f0c2d4e-0002", Key: "evt:order-1003:notify", Reason: idem.CodeKeyReused,
		Detail: "the key is already used with a different payload", BodySHA256: fp, BodySize: 52, At: now.Add(-3 * time.Minute), ExpiresAt: now.Add(335 * time.Hour)}); err != nil {
		f.t.Fatal(err)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestGetHumanOutput(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	released := f.write("evt:order-1008:refund", now.Add(-4*time.Minute), 30*time.Second, failWith("HTTP_422", "422 from downstream", false, 1))
	if _, code := f.runCode("", "release", released.Key, "--reason", "currency bug fixed (INC-7)"); code != 0 {
		t.Fatalf("release exit %d", code)
	}
	// As the function stores failures: the code and its sentence.
	f.write("evt:order-1009:refund", now.Add(-3*time.Minute), 30*time.Second, failWith("HTTP_422", idem.Sentence("HTTP_422"), false, 1))
	// Released after a request that timed out once written: held off for
	// the engine's pause, 3 s of it left.
	f.write("evt:order-1010:notify", now.Add(-2*time.Second), 30*time.Second, func(fin *idem.Finish) {
		failWith(idem.CodeTransientFailure, idem.Sentence(idem.CodeTransientFailure), true, 1)(fin)
		fin.HoldUntil = now.Add(3 * time.Second)
	})
	tests := []struct {
		name string
		args []string
	}{
		{"failed", []string{"evt:order-1001:refund"}},
		{"succeeded", []string{"--id", "order-1003", "--action", "notify"}},
		{"retryable", []string{"evt:order-1004:notify"}},
		{"running", []string{"evt:order-1005:notify"}},
		{"abandoned", []string{"evt:order-1006:notify"}},
		{"exhausted", []string{"evt:order-1007:notify"}},
		{"released", []string{"evt:order-1008:refund"}},
		{"failed-detail-in-log", []string{"evt:order-1009:refund"}},
		{"held-off", []string{"evt:order-1010:notify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := f.run("", append([]string{"get"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("get exit %d, want 0; stderr %s", code, errOut)
			}
			golden(t, "get-"+tt.name, out)
		})
	}
}

func (f *fixture) runCode(stdin string, args ...string) (string, int) {
	f.t.Helper()
	out, _, code := f.run(stdin, args...)
	return out, code
}

// TestListAndStatsHumanOutput needs the index, which minidyn loses on
// UpdateItem (see ddbstore's tests): it runs on moto.
func TestListAndStatsHumanOutput(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	tests := []struct {
		name string
		args []string
	}{
		{"list-failed", []string{"list"}},
		{"list-code", []string{"list", "--code", "HTTP_422"}},
		{"list-page", []string{"list", "--limit", "2"}},
		{"list-poison", []string{"list", "--poison"}},
		{"list-in-progress", []string{"list", "--status", "in_progress"}},
		{"list-abandoned", []string{"list", "--status", "abandoned"}},
		{"list-running", []string{"list", "--status", "running"}},
		{"list-permanent", []string{"list", "--status", "permanent"}},
		{"stats", []string{"stats"}},
		{"stats-scan", []string{"stats", "--scan"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := f.run("", tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stderr %s", code, errOut)
			}
			golden(t, tt.name, out)
		})
	}
}

// TestJSONRoundTrips: what --json prints decodes into the package's types
// and encodes back byte for byte, and gives back the stored records.
func TestJSONRoundTrips(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	f.write("evt:bytes-1:notify", now.Add(-time.Minute), time.Second, succeed("\x00\xff binary"))
	reencode := func(t *testing.T, out string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("decode: %v\n%s", err, out)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(out, b.String()); diff != "" {
			t.Errorf("re-encoded JSON (-printed +re-encoded):\n%s", diff)
		}
	}
	for _, status := range []string{"failed", "all"} {
		t.Run("list_"+status, func(t *testing.T) {
			out, _, code := f.run("", "list", "--status", status, "--json")
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			var lv opsctl.ListView
			reencode(t, out, &lv)
			if len(lv.Records) == 0 {
				t.Fatal("no records listed")
			}
			for _, v := range lv.Records {
				got, err := v.Record()
				if err != nil {
					t.Fatal(err)
				}
				want, found, err := f.admin.Get(context.Background(), v.Key, now)
				if err != nil || !found {
					t.Fatalf("Get(%s) = %v, %v", v.Key, found, err)
				}
				if want.Status != idem.StatusInProgress {
					// A finished record's lease means nothing: the JSON, like
					// get's text, leaves it out.
					if v.LeaseUntil != nil {
						t.Errorf("%s: %s record has lease_until %v in the JSON; want none", v.Key, want.Status, v.LeaseUntil)
					}
					want.LeaseUntil = time.Time{}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: record from JSON (-stored +decoded):\n%s", v.Key, diff)
				}
			}
		})
	}
	t.Run("get", func(t *testing.T) {
		out, _, code := f.run("", "get", "evt:bytes-1:notify", "--json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		var gv opsctl.GetView
		reencode(t, out, &gv)
		got, err := gv.Record.Record()
		if err != nil || string(got.Result) != "\x00\xff binary" {
			t.Errorf("result from JSON %q (%v), want the stored bytes", got.Result, err)
		}
	})
	t.Run("stats", func(t *testing.T) {
		out, _, code := f.run("", "stats", "--json")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		var sv opsctl.StatsView
		reencode(t, out, &sv)
	})
}

func TestBadInput(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	ctx := context.Background()
	other := "orders"
	if _, err := f.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &other, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("order_id"), AttributeType: types.ScalarAttributeTypeN}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("order_id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		vars   map[string]string // replaces the fixture's when set
		noCred bool
		code   int
		stderr string
	}{
		{"no command", nil, nil, false, opsctl.ExitUsage, "usage: oncelyctl COMMAND"},
		{"unknown command", []string{"delete"}, nil, false, opsctl.ExitUsage, `unknown command "delete"`},
		{"unknown flag", []string{"get", "--colour"}, nil, false, opsctl.ExitUsage, "flag provided but not defined: -colour"},
		{"malformed key", []string{"get", "evt:order 1:refund"}, nil, false, opsctl.ExitUsage, `malformed key "evt:order 1:refund": key has character ' ' at byte 9`},
		{"short key", []string{"get", "evt:1"}, nil, false, opsctl.ExitUsage, "key must be 8 to 128 characters, got 5"},
		{"id without action", []string{"get", "--id", "order-1"}, nil, false, opsctl.ExitUsage, "--id and --action go together"},
		{"action with separator", []string{"get", "--id", "order-1", "--action", "a:b"}, nil, false, opsctl.ExitUsage, "contains ':'"},
		{"two ways", []string{"get", "evt:order-1001:refund", "--id", "x", "--action", "y"}, nil, false, opsctl.ExitUsage, "name the record one way"},
		{"bad caller", []string{"get", "--api-key", "order-7f3a9c21", "--caller", "bob"}, nil, false, opsctl.ExitUsage, `--caller "bob"`},
		{"unknown key", []string{"get", "evt:order-9999:refund"}, nil, false, opsctl.ExitNotFound, `no record for key "evt:order-9999:refund" in namespace "shop-notify"`},
		{"wrong table", []string{"get", "evt:order-1001:refund", "--table", "no-such-table"}, nil, false, opsctl.ExitError, `dynamodb DescribeTable on table "no-such-table": ResourceNotFoundException`},
		{"table of another schema", []string{"list", "--table", "orders"}, nil, false, opsctl.ExitError, `dynamodb table "orders" is not an oncely records table: its key is order_id HASH`},
		{"no table", []string{"list"}, map[string]string{"IDEMPOTENCY_NAMESPACE": "x"}, false, opsctl.ExitUsage, "no table: pass --table, or set IDEMPOTENCY_TABLE"},
		{"no namespace", []string{"list"}, map[string]string{"IDEMPOTENCY_TABLE": "t"}, false, opsctl.ExitUsage, "no namespace: pass --namespace"},
		{"namespace of the function name", []string{"get", "evt:order-1001:refund"}, map[string]string{"IDEMPOTENCY_TABLE": f.table, "AWS_LAMBDA_FUNCTION_NAME": "shop-notify"}, false, opsctl.ExitOK, ""},
		{"no credentials", []string{"list"}, nil, true, opsctl.ExitError, "no AWS credentials: set AWS_PROFILE"},
		{"bad status", []string{"list", "--status", "stuck"}, nil, false, opsctl.ExitUsage, `--status "stuck": want a state (failed, permanent, retryable, released, in_progress, running, abandoned, succeeded, all)`},
		{"bad limit", []string{"list", "--limit", "0"}, nil, false, opsctl.ExitUsage, "--limit 0: want 1 to 1000"},
		{"bad since", []string{"list", "--since", "yesterday"}, nil, false, opsctl.ExitUsage, `--since: "yesterday" is neither a duration`},
		{"bad cursor", []string{"list", "--cursor", "qnot-a-cursor!"}, nil, false, opsctl.ExitUsage, "bad cursor"},
		{"reason without poison", []string{"list", "--reason", "NOT_JSON"}, nil, false, opsctl.ExitUsage, "--reason selects poison notes"},
		{"forget without reason", []string{"forget", "evt:order-1001:refund"}, nil, false, opsctl.ExitUsage, "forget needs --reason"},
		{"force without reason", []string{"release", "--force", "evt:order-1005:notify"}, nil, false, opsctl.ExitUsage, "--force needs --reason"},
		{"may repeat without reason", []string{"release", "--may-repeat-side-effect", "evt:order-1005:notify"}, nil, false, opsctl.ExitUsage, "--may-repeat-side-effect needs --reason"},
		{"stdin not JSON", []string{"release", "--stdin"}, nil, false, opsctl.ExitUsage, "--stdin: document 1 is not the JSON of list --json or get --json"},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			g := *f
			g.t = t
			if tt.vars != nil {
				g.vars = tt.vars
			}
			var stdout, stderr bytes.Buffer
			code := opsctl.Run(ctx, tt.args, opsctl.Env{
				Stdin: strings.NewReader("nonsense"), Stdout: &stdout, Stderr: &stderr,
				Getenv: func(k string) string { return g.vars[k] },
				Now:    func() time.Time { return now },
				AWS: func(context.Context, string, string) (aws.Config, error) {
					cfg := ddblocal.Config(f.endpoint, nil)
					if tt.noCred {
						cfg.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
							return aws.Credentials{}, errors.New("failed to refresh cached credentials, no EC2 IMDS role found")
						})
					}
					return cfg, nil
				},
			})
			if code != tt.code {
				t.Errorf("exit code got %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr got %q, want it to contain %q", stderr.String(), tt.stderr)
			}
			if code != opsctl.ExitOK && tt.args != nil && strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
				t.Errorf("stderr got %d lines, want one:\n%s", strings.Count(stderr.String(), "\n"), stderr.String())
			}
		})
	}
}

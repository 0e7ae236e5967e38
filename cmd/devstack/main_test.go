package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/config"
)

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestFunctionEnvPassesTheFunctionsVariables: the stack's function runs
// with the stack's defaults, overridden by the function's variables in the
// environment, overridden by the env file; each value says where it came
// from, and DOWNSTREAM_URL is always the fake downstream.
func TestFunctionEnvPassesTheFunctionsVariables(t *testing.T) {
	env := map[string]string{
		"IDEMPOTENCY_TTL":          "48h",
		"IDEMPOTENCY_LEASE":        "20s",
		"IDEMPOTENCY_MAX_ATTEMPTS": "3",                                        // retired: passed on, for the function to refuse
		"DOWNSTREAM_URL":           "https://hooks.example.com/x?token=s3cret", // printed as scheme and host only
		"HOME":                     "/root",                                    // not the function's: never passed
	}
	file := map[string]string{
		"IDEMPOTENCY_LEASE":         "30s",
		"NOTIFY_TIMEOUT":            "",          // env.json's way of leaving a variable unset
		"DOWNSTREAM_URL_SECRET":     "hooks-url", // the fake downstream replaces it too
		"AWS_ENDPOINT_URL_DYNAMODB": "http://moto:5000",
	}
	got, ignored := functionEnv(getenv(env), file, "http://127.0.0.1:9/webhook")
	want := []setting{
		{Name: "IDEMPOTENCY_TABLE", Value: "oncely-records", Source: fromStack},
		{Name: "IDEMPOTENCY_NAMESPACE", Value: "oncely-notify", Source: fromStack},
		{Name: "IDEMPOTENCY_TTL", Value: "48h", Source: fromEnv},
		{Name: "IDEMPOTENCY_LEASE", Value: "30s", Source: fromFile},
		{Name: "IDEMPOTENCY_KEY_JMESPATH", Value: "['evt', id, action]", Source: fromStack},
		{Name: "SQS_BACKOFF", Value: "off", Source: fromStack},
		{Name: "DOWNSTREAM_URL", Value: "http://127.0.0.1:9/webhook", Source: fromFake,
			Note: "https://hooks.example.com from your environment and DOWNSTREAM_URL_SECRET hooks-url from the env file not used"},
		{Name: "WEBHOOK_SIGNING", Value: "off", Source: fromStack},
		{Name: "IDEMPOTENCY_MAX_ATTEMPTS", Value: "3", Source: fromEnv},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("function env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"AWS_ENDPOINT_URL_DYNAMODB"}, ignored); diff != "" {
		t.Errorf("ignored (-want +got):\n%s", diff)
	}
}

// TestReadEnvFile reads NAME=value lines as a shell sources them, and the
// project's own env.json (SAM's shape).
func TestReadEnvFile(t *testing.T) {
	dir := t.TempDir()
	dotenv := filepath.Join(dir, "mine.env")
	if err := os.WriteFile(dotenv, []byte("# mine\n\nexport IDEMPOTENCY_TTL=48h\nIDEMPOTENCY_KEY_JMESPATH=\"['evt', id, action]\"\n  MAX_CONCURRENCY = 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readEnvFile(dotenv)
	want := map[string]string{"IDEMPOTENCY_TTL": "48h", "IDEMPOTENCY_KEY_JMESPATH": "['evt', id, action]", "MAX_CONCURRENCY": "4"}
	if err != nil || !cmp.Equal(want, got) {
		t.Errorf("readEnvFile(dotenv) = %v, %v; want %v", got, err, want)
	}
	sam, err := readEnvFile("../../env.json")
	if err != nil || sam["IDEMPOTENCY_TTL"] != "432h" || sam["SQS_BACKOFF_BASE"] != "30s" || sam["NOTIFY_TIMEOUT"] != "5s" {
		t.Errorf("readEnvFile(env.json) = %v, %v; want Parameters overridden by QueueFunction (not ApiFunction)", sam, err)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("IDEMPOTENCY_TTL 48h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readEnvFile(bad); err == nil || !strings.Contains(err.Error(), "bad.env:1: want NAME=value") {
		t.Errorf("readEnvFile(a line without =) = %v; want the line named", err)
	}
}

// TestEnvJSONRunsOnTheStack: the project's env.json, handed to the stack,
// is a configuration the function accepts (its endpoints are ignored, its
// downstream replaced by the fake one).
func TestEnvJSONRunsOnTheStack(t *testing.T) {
	file, err := readEnvFile("../../env.json")
	if err != nil {
		t.Fatal(err)
	}
	settings, _ := functionEnv(getenv(nil), file, "http://127.0.0.1:9/webhook")
	if _, err := config.Load(lookup(settings, map[string]string{config.EnvFunctionName: functionName})); err != nil {
		t.Errorf("env.json on the stack: %v", err)
	}
}

// TestABadValueStopsTheStackAsTheFunctionStops: IDEMPOTENCY_TTL=forever
// used to start a stack that ignored it. Now the stack prints what the
// function would run with and the line the function's init prints, starts
// nothing, and fails.
func TestABadValueStopsTheStackAsTheFunctionStops(t *testing.T) {
	for name, bad := range map[string]map[string]string{
		"ttl":     {"IDEMPOTENCY_TTL": "forever"},
		"backoff": {"SQS_BACKOFF": "maybe"},
		"retired": {"IDEMPOTENCY_MAX_ATTEMPTS": "3"},
		"signing": {"WEBHOOK_SIGNING": "on"},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:1"}
			for k, v := range bad {
				env[k] = v
			}
			settings, _ := functionEnv(getenv(env), nil, "http://127.0.0.1:9/webhook")
			_, want := config.Load(lookup(settings, map[string]string{config.EnvFunctionName: functionName}))
			if want == nil {
				t.Fatal("config.Load accepted the bad value")
			}
			var out bytes.Buffer
			dir := t.TempDir()
			err := run(context.Background(), &out, getenv(env), options{rie: "/nonexistent", bootstrap: "/nonexistent", dir: dir, bin: dir})
			if !errors.Is(err, errRefused) || !strings.Contains(out.String(), "\n"+want.Error()+"\n") {
				t.Errorf("run = %v, output:\n%s\nwant refused with the function's line %q", err, out.String(), want)
			}
			for k, v := range bad {
				if !strings.Contains(out.String(), k) || !strings.Contains(out.String(), v) {
					t.Errorf("the output does not say the function runs with %s=%s:\n%s", k, v, out.String())
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "env")); err == nil {
				t.Error("a refused stack wrote its env file")
			}
		})
	}
}

// TestClientCommands: the commands that replace the aws CLI, jq and curl
// in the walkthrough, without a stack where none is needed.
func TestClientCommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := client("body", []string{"../../events/sqs-notify-corrected.json"}, getenv(nil), nil, &out, &errOut); code != 0 ||
		!strings.HasPrefix(out.String(), `{"id":"order-1004"`) {
		t.Errorf("body: exit %d, %q %q; want the first record's body", code, out.String(), errOut.String())
	}
	for _, tt := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"invoke", []string{"x.json"}, "ONCELY_FUNCTION is not set: source the stack's env file"},
		{"rules", []string{"clear"}, "ONCELY_WEBHOOK is not set"},
		{"body", []string{"../../events/sqs-notify-corrected.json", "9"}, "has 1 records, not 9"},
		{"frobnicate", nil, "unknown command"},
	} {
		out.Reset()
		errOut.Reset()
		if code := client(tt.cmd, tt.args, getenv(nil), nil, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%s %v: exit %d, stderr %q; want 1, %q", tt.cmd, tt.args, code, errOut.String(), tt.want)
		}
	}
}

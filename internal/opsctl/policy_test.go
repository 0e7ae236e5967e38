package opsctl_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/opsctl"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// The template's operator policies are ddbstore's read and write actions:
// each command, run on a real (in-process) table, calls only the DynamoDB
// actions of its policy (get, list, stats: the read-only one; release and
// forget: the operator one). TransactWriteItems is authorised by the
// actions of its parts (a forget's Delete and Put).
func TestCommandsStayWithinTheirPolicy(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	read := ddbstore.AdminReadIAMActions()
	write := append(slices.Clone(read), ddbstore.AdminWriteIAMActions()...)
	parts := map[string][]string{"TransactWriteItems": {"dynamodb:DeleteItem", "dynamodb:PutItem"}}
	for _, c := range []struct {
		args    []string
		allowed []string
	}{
		{[]string{"get", "evt:order-1001:refund"}, read},
		{[]string{"list", "--status", "failed"}, read},
		{[]string{"list", "--status", "all", "--scan"}, read},
		{[]string{"list", "--poison"}, read},
		{[]string{"stats", "--since", "720h"}, read},
		{[]string{"release", "evt:order-1001:refund", "--reason", "fixed"}, write},
		{[]string{"forget", "evt:order-1004:notify", "--reason", "corrected event follows"}, write},
	} {
		var mu sync.Mutex
		var called []string
		record := middleware.InitializeMiddlewareFunc("record-operation", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if awsmiddleware.GetServiceID(ctx) == "DynamoDB" {
				mu.Lock()
				called = append(called, awsmiddleware.GetOperationName(ctx))
				mu.Unlock()
			}
			return next.HandleInitialize(ctx, in)
		})
		var stdout, stderr bytes.Buffer
		code := opsctl.Run(context.Background(), c.args, opsctl.Env{
			Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return f.vars[k] }, Now: func() time.Time { return now },
			AWS: func(context.Context, string, string) (aws.Config, error) {
				cfg := ddblocal.Config(f.endpoint, nil)
				cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error { return s.Initialize.Add(record, middleware.Before) })
				return cfg, nil
			},
			NewToken: func() string { return "policy-token" },
		})
		if code != opsctl.ExitOK {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr.String())
		}
		if len(called) == 0 {
			t.Fatalf("%v: recorded no DynamoDB call; the recorder is broken", c.args)
		}
		for _, op := range called {
			actions := parts[op]
			if actions == nil {
				actions = []string{"dynamodb:" + op}
			}
			for _, a := range actions {
				if !slices.Contains(c.allowed, a) {
					t.Errorf("%v calls %s (%s); its policy allows %q", c.args, op, a, c.allowed)
				}
			}
		}
	}
}

// --caller names every scope the API keys by, so an operator finds an API
// caller's record: the key oncelyctl looks up is the one the function stored.
func TestCallerNamesEveryScope(t *testing.T) {
	f := minidynFixture(t)
	for caller, scope := range map[string]string{
		"anonymous":                     "anonymous",
		"jwt:user-1":                    "jwt:user-1",
		`jwt@"https://other.example":u`: apigw.JWTScope("https://other.example", "u", ""),
		"iam:arn:aws:sts::111122223333:assumed-role/Publisher/i-1": "iam:arn:aws:sts::111122223333:assumed-role/Publisher",
		"cognito:us-east-1:pool/us-east-1:id":                      apigw.CognitoScope("us-east-1:pool", "us-east-1:id"),
		"lambda:tenant-9":                                          "lambda:tenant-9",
	} {
		_, stderr, code := f.run("", "get", "--api-key", "order-7f3a9c21", "--caller", caller)
		want := apigw.ScopedKey(scope, "order-7f3a9c21")
		if code != opsctl.ExitNotFound || !strings.Contains(stderr, want) {
			t.Errorf("--caller %s: exit %d, %q; want not found for %s", caller, code, stderr, want)
		}
	}
}

package opsctl_test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

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

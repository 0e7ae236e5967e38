package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// CreateTable creates the records table for local runs and tests:
// PAY_PER_REQUEST, hash key pk (S), the triage index (see admin.go), TTL on
// expires_at: the table template.yaml declares. It waits until the table
// is active. ttl is false, with an error wrapping ErrNoTTL, when the
// server has no TTL API (minidyn).
//
// It is never called in the Lambda request path: deployed tables come from
// the SAM template.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) (ttl bool, err error) {
	var attempts attemptLog
	_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   &table,
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrTriage), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(AttrTriageSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(IndexTriage),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrTriage), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrTriageSK), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	}, attempts.option)
	if _, exists := errors.AsType[*types.ResourceInUseException](err); exists && attempts.retried() {
		// The SDK retried after an attempt whose reply was lost (a reset, a
		// 5xx), and the server had already created the table on that
		// attempt: "already exists" is then our own create, not someone
		// else's table. Without a retry before it, it stays an error.
		err = nil
	}
	if err != nil {
		return false, fmt.Errorf("create table %q: %w%s", table, err, attempts.String())
	}
	if err := waitActive(ctx, client, table); err != nil {
		return false, err
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true)},
	})
	if err != nil && !ttlEnabled(ctx, client, table) {
		// ttlEnabled covers the same kind of retry as above: DynamoDB
		// refuses to enable TTL twice, so a retried enable fails although
		// the first attempt worked.
		return false, fmt.Errorf("%w: table %q: %w", ErrNoTTL, table, err)
	}
	return true, nil
}

// ttlEnabled reports whether TTL is on (or turning on) for TTLAttribute.
func ttlEnabled(ctx context.Context, client *dynamodb.Client, table string) bool {
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &table})
	if err != nil || out.TimeToLiveDescription == nil {
		return false
	}
	d := out.TimeToLiveDescription
	on := d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling
	return on && aws.ToString(d.AttributeName) == TTLAttribute
}

// ErrNoTTL is returned by CreateTable when the table was created but TTL
// could not be enabled (minidyn has no TTL API). Callers that can live
// without TTL (expiry is also checked at read time) may ignore it.
var ErrNoTTL = errors.New("table created, but TTL could not be enabled")

// waitActive polls until the table is ACTIVE. The SDK's waiter is not used
// because minidyn reports no TableStatus at all; an empty status counts as
// active.
func waitActive(ctx context.Context, client *dynamodb.Client, table string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err == nil && (out.Table.TableStatus == types.TableStatusActive || out.Table.TableStatus == "") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("table %q not active after a minute (last error: %v)", table, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attemptLog records the error of each failed attempt of one SDK call (the
// SDK's retryer makes the attempts, one after another on the caller's
// goroutine; this only watches them).
type attemptLog struct {
	errs []error
}

// option is a per-call SDK option that installs the recorder after the
// retry middleware, where it sees each attempt.
func (l *attemptLog) option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("ddbstoreAttemptLog",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				if err != nil {
					l.errs = append(l.errs, err)
				}
				return out, md, err
			}), middleware.After)
	})
}

// String lists the failed attempts before the last, for error messages.
func (l *attemptLog) String() string {
	if len(l.errs) < 2 {
		return ""
	}
	return fmt.Sprintf(" (after earlier attempts failed: %v)", errors.Join(l.errs[:len(l.errs)-1]...))
}

// retried reports whether an attempt failed before the last one.
func (l *attemptLog) retried() bool {
	return len(l.errs) > 1
}

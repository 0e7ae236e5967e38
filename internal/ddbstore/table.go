package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTable creates the records table for local runs and tests:
// PAY_PER_REQUEST, hash key pk (S), TTL on expires_at. It waits until the
// table is active. ttl is false, with an error wrapping ErrNoTTL, when the
// server has no TTL API (minidyn).
//
// It is never called in the Lambda request path: deployed tables come from
// the SAM template.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) (ttl bool, err error) {
	_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(AttrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(AttrPK), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		return false, fmt.Errorf("create table %q: %w", table, err)
	}
	if err := waitActive(ctx, client, table); err != nil {
		return false, err
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return false, fmt.Errorf("%w: table %q: %w", ErrNoTTL, table, err)
	}
	return true, nil
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

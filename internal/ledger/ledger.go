// Package ledger is the example transactional action (ACTION=ledger): it
// appends one entry per event to a ledger table. It does not write the
// entry itself; it hands the write back as an effect, and the DynamoDB
// store commits it in the same transaction as the idempotency record's
// completion. Either both happen or neither does: a crash at any moment
// leaves no entry without a completed record, and no completed record
// without its entry, so an event is entered exactly once.
//
// The entry's put is conditional on the entry not existing, so an entry
// can never exist twice, even if something bypasses the engine.
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
)

// The ledger table's attributes.
const (
	AttrEntry      = "pk"          // the event's idempotency key: one entry per event
	AttrEvent      = "event"       // the event as received (JSON text)
	AttrSource     = "source"      // sqs or http
	AttrRecordedAt = "recorded_at" // epoch milliseconds
)

// maxEventBytes keeps an entry well inside DynamoDB's 400 KB item limit.
const maxEventBytes = 350_000

// RequiredIAMActions are exactly the IAM actions the entries need, on the
// ledger table only (a transaction's Put needs PutItem).
func RequiredIAMActions() []string { return []string{"dynamodb:PutItem"} }

// Ledger appends entries to one table. It is safe for concurrent use: Do
// only reads its fields.
type Ledger struct {
	Table string
	// Now stamps entries. Nil means time.Now.
	Now func() time.Time
}

// entry is the result stored and replayed for an event.
type entry struct {
	Entry string `json:"ledger_entry"`
	Table string `json:"table"`
}

// Do implements action.Func: it returns the entry's put as an effect.
func (l *Ledger) Do(_ context.Context, ev action.Event) (action.Result, error) {
	if len(ev.Body) > maxEventBytes {
		return action.Result{}, idem.PermanentCode(idem.CodeTooLarge,
			fmt.Errorf("ledger: the event is %d bytes; an entry holds at most %d", len(ev.Body), maxEventBytes))
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	put := types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(l.Table),
		Item: map[string]types.AttributeValue{
			AttrEntry:      &types.AttributeValueMemberS{Value: ev.Key},
			AttrEvent:      &types.AttributeValueMemberS{Value: string(ev.Body)},
			AttrSource:     &types.AttributeValueMemberS{Value: ev.Source},
			AttrRecordedAt: &types.AttributeValueMemberN{Value: strconv.FormatInt(now().UnixMilli(), 10)},
		},
		// An entry exists at most once, whoever writes it.
		ConditionExpression:      aws.String("attribute_not_exists(#entry)"),
		ExpressionAttributeNames: map[string]string{"#entry": AttrEntry},
	}}
	body, _ := json.Marshal(entry{Entry: ev.Key, Table: l.Table}) // strings always marshal
	return action.Result{Status: 201, Body: body, Effects: dynamostore.Effects{put}}, nil
}

package ddbstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/awserr"
	"github.com/oncely/oncely/internal/idem"
)

// Transaction limits (DynamoDB's TransactWriteItems).
const (
	// MaxEffects is the most writes an action may hand back: 100 items per
	// transaction, less the record's own completion.
	MaxEffects = 99
	// MaxTransactionBytes is the transaction's 4 MB aggregate limit, read
	// as 4,000,000 bytes (a margin costs nothing).
	MaxTransactionBytes = 4_000_000
	// maxTokenLen is the ClientRequestToken's limit.
	maxTokenLen = 36
)

// Effects are the implementation's name for dynamostore.Effects (the
// public type, which actions return; dynamostore.Store converts it to this
// one before committing), used by this package's own tests and tools.
//
// Effects are an action's writes in DynamoDB's terms: Put, Update, Delete
// or ConditionCheck transaction items, on any table the function may write,
// each with its own condition if it needs one. The store commits them with
// the record's completion in one TransactWriteItems.
//
// The store checks the limits it can before sending: at most MaxEffects
// writes, an item and the whole under DynamoDB's sizes, and no two writes
// to one item, which it recognises by the key attributes pk (and sk) — a
// table keyed otherwise relies on DynamoDB's own check, whose refusal is
// reported the same way (INVALID_EFFECTS).
type Effects []types.TransactWriteItem

// Len implements idem.Effects.
func (e Effects) Len() int { return len(e) }

// TransactClient is the part of *dynamodb.Client CompleteWithEffects adds
// to Client.
type TransactClient interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// CompleteWithEffects implements idem.EffectStore with one
// TransactWriteItems: the record's completion first (conditional on our
// token and IN_PROGRESS: fencing), then the action's writes.
//
// A lost reply is safe to repeat: the re-send carries the same
// ClientRequestToken (a digest of the key and our token), which makes
// DynamoDB answer a repeat within ten minutes with success. Where the token
// does not help (a repeat after ten minutes, or a server that ignores it,
// as moto and minidyn do), the repeat is cancelled on the record's own
// condition, and the record read back says what happened: SUCCEEDED under
// our token means the first attempt committed, which is success.
func (s *Store) CompleteWithEffects(ctx context.Context, f idem.Finish, effects idem.Effects) error {
	eff, ok := effects.(Effects)
	if !ok {
		return invalidEffects("the action's writes are %T; the DynamoDB store commits ddbstore.Effects", effects)
	}
	tc, ok := s.client.(TransactClient)
	if !ok {
		return invalidEffects("the DynamoDB client %T cannot run transactions", s.client)
	}
	result, enc, err := encodeResult(f.Result, len(s.pk(f.Key)))
	if err != nil {
		return err
	}
	record := types.TransactWriteItem{Update: &types.Update{
		TableName:        &s.table,
		Key:              keyOfPK(s.pk(f.Key)),
		UpdateExpression: aws.String(completeExpression),
		// Fenced, and only from IN_PROGRESS: a record another owner took
		// over, or one already finished, takes none of these writes.
		ConditionExpression:       aws.String("#token = :token AND #status = :in_progress"),
		ExpressionAttributeNames:  completeNames,
		ExpressionAttributeValues: completeValues(f, result, enc),
	}}
	record.Update.ExpressionAttributeValues[":in_progress"] = str(string(idem.StatusInProgress))
	items := append([]types.TransactWriteItem{record}, eff...)
	if err := s.checkEffects(f, items); err != nil {
		return err
	}
	_, err = tc.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems:      items,
		ClientRequestToken: aws.String(requestToken(f.Key, f.Token)),
	})
	if err == nil {
		return nil
	}
	return s.transactionError(ctx, f, items, err)
}

// requestToken is the ClientRequestToken for one owner's completion of one
// key: the same for every re-send, at most 36 characters.
func requestToken(key, token string) string {
	sum := sha256.Sum256([]byte(key + "\x00" + token))
	return hex.EncodeToString(sum[:])[:maxTokenLen]
}

// checkEffects enforces the transaction's limits before anything is sent.
func (s *Store) checkEffects(f idem.Finish, items []types.TransactWriteItem) error {
	if n := len(items) - 1; n > MaxEffects {
		return invalidEffects("the action returned %d writes; a transaction holds at most %d besides the record", n, MaxEffects)
	}
	seen := map[string]int{}
	size := 0
	for i, it := range items {
		table, key, n, err := describeItem(it)
		if err != nil {
			return invalidEffects("write #%d: %v", i, err)
		}
		if n > MaxItemBytes {
			return invalidEffects("write #%d (table %s, %s) is about %d bytes; an item holds at most %d", i, table, key, n, MaxItemBytes)
		}
		// A table named by its ARN is the same table: compare names.
		if j := strings.LastIndex(table, ":table/"); j >= 0 {
			table = table[j+len(":table/"):]
		}
		id := table + "\x00" + key
		if j, dup := seen[id]; dup {
			if j == 0 {
				return invalidEffects("write #%d targets the idempotency record itself (%s)", i, key)
			}
			return invalidEffects("writes #%d and #%d target the same item (table %s, %s): a transaction writes an item once", j, i, table, key)
		}
		seen[id] = i
		size += n
	}
	if size > MaxTransactionBytes {
		return invalidEffects("the writes come to about %d bytes; a transaction holds at most %d", size, MaxTransactionBytes)
	}
	return nil
}

// transactionError turns a failed transaction into the contract's errors.
// What a failure means for retrying it is the translator's (awserr, through
// classify), also for each item's cancellation reason; this function only
// reads what the contract makes of it: our record's condition (lease lost,
// or an earlier send of this call that committed), an effect's condition
// (EFFECT_CONDITION_FAILED) and a refused write (INVALID_EFFECTS).
func (s *Store) transactionError(ctx context.Context, f idem.Finish, items []types.TransactWriteItem, err error) error {
	tce, ok := errors.AsType[*types.TransactionCanceledException](err)
	if !ok {
		if api, ok := errors.AsType[smithy.APIError](err); ok && api.ErrorCode() == "ValidationException" {
			// Our own record update is fixed and valid: what DynamoDB
			// refuses is in the action's writes (a key schema we cannot
			// check, an item too large, two writes to one item).
			return invalidEffects("dynamodb refused the transaction: %s", api.ErrorMessage())
		}
		return s.classify("TransactWriteItems", err)
	}
	reasons := tce.CancellationReasons
	code := func(i int) string {
		if i < len(reasons) {
			return aws.ToString(reasons[i].Code)
		}
		return ""
	}
	if code(0) == "ConditionalCheckFailed" {
		// Our record is not ours, or not IN_PROGRESS. If it is SUCCEEDED
		// under our token, an earlier attempt of this very call committed
		// (its reply was lost): that is success, never a failure.
		rec, found, gerr := s.Get(ctx, f.Key, f.Now)
		if gerr != nil {
			return gerr
		}
		if found && rec.Status == idem.StatusSucceeded && rec.Token == f.Token {
			return nil
		}
		return idem.ErrLeaseLost
	}
	for i := 1; i < len(items); i++ {
		if code(i) == "ConditionalCheckFailed" {
			table, key, _, _ := describeItem(items[i])
			return idem.PermanentCode(idem.CodeEffectConditionFailed,
				fmt.Errorf("write #%d (table %s, %s) failed its condition; nothing was applied", i, table, key))
		}
	}
	for i := range reasons {
		if code(i) == "ValidationError" {
			return invalidEffects("write #%d: %s", i, aws.ToString(reasons[i].Message))
		}
		// A reason is an item's error code in a form of its own: the
		// translator judges it under the API's name for it.
		reason := &smithy.GenericAPIError{Code: cancellationCode(code(i)), Message: aws.ToString(reasons[i].Message)}
		switch awserr.Classify(reason) {
		case idem.ClassTransient:
			return idem.Transient(fmt.Errorf("dynamodb TransactWriteItems on table %q: %s on write #%d: %w", s.table, code(i), i, err))
		case idem.ClassPermanent:
			return idem.Permanent(fmt.Errorf("dynamodb TransactWriteItems on table %q: %s on write #%d: %w", s.table, code(i), i, err))
		}
	}
	// A cancelled transaction applied nothing: a reason nobody knows is
	// retried, never stored as a verdict.
	return idem.Transient(fmt.Errorf("dynamodb TransactWriteItems on table %q: %w", s.table, err))
}

// cancellationCode is the API's error code for a cancellation reason's
// code (DynamoDB's TransactWriteItems documentation lists both).
func cancellationCode(reason string) string {
	switch reason {
	case "ThrottlingError":
		return "ThrottlingException"
	case "ProvisionedThroughputExceeded":
		return "ProvisionedThroughputExceededException"
	case "TransactionConflict":
		return "TransactionConflictException"
	case "ItemCollectionSizeLimitExceeded":
		return "ItemCollectionSizeLimitExceededException"
	}
	return reason // RequestLimitExceeded, and None
}

func invalidEffects(format string, args ...any) error {
	return idem.PermanentCode(idem.CodeInvalidEffects, fmt.Errorf(format, args...))
}

// describeItem returns a transaction item's table, a description of its
// key, and an estimate of its size in bytes.
func describeItem(it types.TransactWriteItem) (table, key string, size int, err error) {
	var (
		t      *string
		k      map[string]types.AttributeValue
		values map[string]types.AttributeValue
		n      int
	)
	// Counted one by one: a write that sets two kinds is refused here, not
	// sent for DynamoDB's validation to refuse.
	if it.Put != nil {
		t, k, values = it.Put.TableName, it.Put.Item, it.Put.ExpressionAttributeValues
		n++
	}
	if it.Update != nil {
		t, k, values = it.Update.TableName, it.Update.Key, it.Update.ExpressionAttributeValues
		size += len(aws.ToString(it.Update.UpdateExpression))
		n++
	}
	if it.Delete != nil {
		t, k, values = it.Delete.TableName, it.Delete.Key, it.Delete.ExpressionAttributeValues
		n++
	}
	if it.ConditionCheck != nil {
		t, k, values = it.ConditionCheck.TableName, it.ConditionCheck.Key, it.ConditionCheck.ExpressionAttributeValues
		n++
	}
	if n != 1 || aws.ToString(t) == "" || len(k) == 0 {
		return "", "", 0, errors.New("each write must be exactly one of Put, Update, Delete or ConditionCheck, with a table and a key")
	}
	table = aws.ToString(t)
	size += ItemSize(k) + ItemSize(values) // names and values, as DynamoDB counts them
	if it.Put != nil {
		// The key of a Put is in its item: name the key attributes we know
		// (pk, and sk when there is one), or every attribute of a small item.
		k = keyOf(it.Put.Item)
	}
	return table, describeKey(k), size, nil
}

// keyOf picks the likely key attributes of a Put's item for messages and
// duplicate checks: pk and sk if present, else the whole item.
func keyOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{}
	for _, name := range []string{AttrPK, "sk"} {
		if v, ok := item[name]; ok {
			k[name] = v
		}
	}
	if len(k) == 0 {
		return item
	}
	return k
}

func describeKey(k map[string]types.AttributeValue) string {
	parts := make([]string, 0, len(k))
	for name, v := range k {
		parts = append(parts, name+"="+scalar(v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func scalar(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return idem.Truncate(v.Value, 200)
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("<%d bytes>", len(v.Value))
	default:
		return fmt.Sprintf("<%T>", v)
	}
}

func sumLen[T ~string | ~[]byte](xs []T) int {
	n := 0
	for _, x := range xs {
		n += len(x)
	}
	return n
}

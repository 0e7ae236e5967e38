package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/idem"
)

// The operators' additions to the table contract (docs/table.md).
//
// The triage index is a sparse global secondary index: only FAILED records
// and poison notes carry its key. Fail and RecordPoison set it, an
// operator's Release keeps it (a released record is FAILED), and a
// take-over's whole-item PutItem drops it; Reserve and Complete never set
// it. Every success passes through IN_PROGRESS, so indexing in-progress
// records would charge every event an index write and an index delete;
// failures are few, and they are what an operator looks for.
//
// Its partition key is spread over TriageShards values per namespace and
// kind, so that a burst of failures (a downstream answering 422 to
// everything, fast) is not capped by one index partition's write rate
// (1,000 writes/s), which DynamoDB would push back onto the function's own
// writes as throttling. Listing queries every shard and merges them.
const (
	AttrAudit    = "audit"
	AttrTriage   = "triage"    // <namespace>#FAILED#<shard> or <namespace>#POISON#<shard>
	AttrTriageSK = "triage_sk" // <updated_at: 13 digits of epoch ms>#<key or message id>
	IndexTriage  = "triage"
	TriageShards = 4

	// StatusForgotten marks a forget note: what an operator deleted, by
	// whom and why, under "<namespace>#forgotten#<key>".
	StatusForgotten = "FORGOTTEN"
	// AttrForgottenStatus is the status the forgotten record had.
	AttrForgottenStatus = "forgotten_status"
)

// AdminClient is the part of *dynamodb.Client that Admin uses.
type AdminClient interface {
	Client
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// AdminIAMActions are the IAM actions an operator's credentials need on
// the table for every Admin method (TransactWriteItems is authorised by
// the actions of its parts). The function's role never gets them.
func AdminIAMActions() []string {
	return append(AdminReadIAMActions(), AdminWriteIAMActions()...)
}

// AdminReadIAMActions are the actions of the reading methods (Check,
// Inspect, List, GetForgotten: oncelyctl get, list and stats), on the table
// and its triage index. The template's read-only operator policy grants
// exactly these.
func AdminReadIAMActions() []string {
	return []string{"dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"}
}

// AdminWriteIAMActions are what Release and Forget add to the reads
// (oncelyctl release and forget): a release's conditional put; a forget's
// transaction, a delete and its note's put. The template's operator policy
// grants these with the reads.
func AdminWriteIAMActions() []string {
	return []string{"dynamodb:PutItem", "dynamodb:DeleteItem"}
}

// Admin is the operators' view of a function's records: the function's
// Store (same encoding, same reads) plus idem.Operator, listing, forget
// notes and a check of the table. It runs with an operator's credentials,
// never in the function. It is safe for concurrent use once Check has run.
type Admin struct {
	*Store
	admin   AdminClient
	indexed bool // the table has the triage index (Check finds out)
}

// NewAdmin returns an Admin on table for the function whose namespace is
// namespace. Errors about permissions name the operator's credentials.
func NewAdmin(client AdminClient, table, namespace string) (*Admin, error) {
	st, err := New(client, table, namespace)
	if err != nil {
		return nil, err
	}
	st.caller = "your credentials need"
	return &Admin{Store: st, admin: client, indexed: true}, nil
}

// Namespace returns the namespace.
func (a *Admin) Namespace() string { return a.namespace }

// ErrWrongTable means the table exists but is not an oncely records table.
var ErrWrongTable = errors.New("not an oncely records table")

// TableInfo is what Check learned about the table.
type TableInfo struct {
	Indexed   bool  // the triage index exists; without it listings scan
	ItemCount int64 // DynamoDB's estimate, refreshed about every six hours
	SizeBytes int64 // likewise
}

// Check reads the table's description and verifies it has oncely's key
// schema. A table of another schema gives an error matching ErrWrongTable
// that says what the table has instead. A table without the triage index
// (created before it existed) is accepted: listings then scan.
func (a *Admin) Check(ctx context.Context) (TableInfo, error) {
	out, err := a.admin.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &a.table})
	if err != nil {
		return TableInfo{}, a.classify("DescribeTable", err)
	}
	t := out.Table
	attrTypes := map[string]types.ScalarAttributeType{}
	for _, d := range t.AttributeDefinitions {
		attrTypes[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	var schema []string
	ok := len(t.KeySchema) == 1
	for _, k := range t.KeySchema {
		name, typ := aws.ToString(k.AttributeName), attrTypes[aws.ToString(k.AttributeName)]
		// Some servers (minidyn) describe no attribute types: check what is there.
		ok = ok && name == AttrPK && k.KeyType == types.KeyTypeHash && (typ == "" || typ == types.ScalarAttributeTypeS)
		if typ == "" {
			typ = "type not described"
		}
		schema = append(schema, fmt.Sprintf("%s %s (%s)", name, k.KeyType, typ))
	}
	want := fmt.Sprintf("%s HASH (S)", AttrPK)
	if !ok {
		return TableInfo{}, idem.Permanent(fmt.Errorf("dynamodb table %q is %w: its key is %s, want %s; check --table or %s",
			a.table, ErrWrongTable, strings.Join(schema, ", "), want, "IDEMPOTENCY_TABLE"))
	}
	info := TableInfo{ItemCount: aws.ToInt64(t.ItemCount), SizeBytes: aws.ToInt64(t.TableSizeBytes)}
	for _, gsi := range t.GlobalSecondaryIndexes {
		if aws.ToString(gsi.IndexName) == IndexTriage {
			info.Indexed = true
		}
	}
	a.indexed = info.Indexed
	return info, nil
}

// Inspect returns the stored record for key as it is, expired or not, so
// that an operator can see a record that already counts as absent.
func (a *Admin) Inspect(ctx context.Context, key string) (idem.Record, bool, error) {
	out, err := a.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &a.table,
		Key:            keyOfPK(a.pk(key)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return idem.Record{}, false, a.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return idem.Record{}, false, nil
	}
	rec, err := decode(out.Item, a.namespace)
	return rec, err == nil, err
}

// current returns the live record for key, or a zero Record.
func (a *Admin) current(ctx context.Context, key string, now time.Time) (idem.Record, error) {
	rec, found, err := a.Get(ctx, key, now)
	if err != nil || !found {
		return idem.Record{}, err
	}
	return rec, nil
}

// Release implements idem.Operator with one PutItem of the whole released
// record, conditional on the record the operator saw.
func (a *Admin) Release(ctx context.Context, prev idem.Record, r idem.Release) (idem.Record, bool, error) {
	if len(r.Audit) > idem.MaxAudit {
		return idem.Record{}, false, idem.Permanent(fmt.Errorf("ddbstore: audit is %d bytes; a record holds at most %d", len(r.Audit), idem.MaxAudit))
	}
	if idem.Releasable(prev, r) != nil {
		rec, err := a.current(ctx, prev.Key, r.Now)
		return rec, false, err
	}
	rec := idem.Released(prev, r)
	item := a.item(rec)
	// The operator's compare-and-swap (token, status, attempts, and a
	// failure's code and retryable flag) with the release rule re-checked
	// on the stored values: a live owner keeps its lease unless the
	// operator forces it.
	states := map[string]types.AttributeValue{":failed": str(string(idem.StatusFailed)), ":in_progress": str(string(idem.StatusInProgress))}
	swap, names, leaseNames := operatorSwapOn(prev, r.Now)
	if r.Force {
		swap = swap.and("(#status = :failed OR #status = :in_progress)", names, states)
	} else {
		states[":now_ms"] = ms(r.Now)
		swap = swap.and("(#status = :failed OR (#status = :in_progress AND #lease_until <= :now_ms))", leaseNames, states)
	}
	_, err := a.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &a.table,
		Item:                                item,
		ConditionExpression:                 &swap.expr,
		ExpressionAttributeNames:            swap.names,
		ExpressionAttributeValues:           swap.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		rec, err := decode(item, a.namespace)
		return rec, err == nil, err
	}
	ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	if !ok {
		return idem.Record{}, false, a.classify("PutItem", err)
	}
	cur, err := a.found(ctx, ccf.Item, prev.Key, r.Now)
	// A re-send (the SDK's, after a lost reply) fails against our own
	// write: the record under our token is the release we made.
	return cur, err == nil && idem.ReleasedBy(cur, r.Token), err
}

// operatorSwapOn is the compare-and-swap of an operator's write, the
// condition form of idem.StillAsRead: swapOn (token, status, attempts,
// unexpired) and, for a FAILED prev, the stored error code and retryable
// flag are prev's. The rule was judged on prev (Releasable, Forgettable
// read a failure's code); without these, a failure rewritten under the same
// token since the read (OUTCOME_UNKNOWN over a retryable one) would be
// released or forgotten by a judgement made on another code. A record that
// is not FAILED has neither attribute, and DynamoDB refuses a name no
// expression uses, so the names differ: names are those of the condition
// and leaseNames those of it with #lease_until, for the caller's rule.
func operatorSwapOn(prev idem.Record, now time.Time) (c condition, names, leaseNames map[string]string) {
	c = swapOn(prev, now)
	if prev.Status != idem.StatusFailed {
		return c, swapNames, swapLeaseNames
	}
	return c.and("#error_code = :prev_code AND #retryable = :prev_retryable", failedSwapNames, map[string]types.AttributeValue{
		":prev_code":      str(string(prev.ErrorCode)),
		":prev_retryable": &types.AttributeValueMemberBOOL{Value: prev.Retryable},
	}), failedSwapNames, failedSwapLeaseNames
}

// found decodes the item a failed condition returned, or reads the record
// when the server left it out (minidyn does); expired counts as absent.
func (a *Admin) found(ctx context.Context, item map[string]types.AttributeValue, key string, now time.Time) (idem.Record, error) {
	if len(item) == 0 {
		return a.current(ctx, key, now)
	}
	rec, err := decode(item, a.namespace)
	if err != nil || rec.Expired(now) {
		return idem.Record{}, err
	}
	return rec, nil
}

// Forget implements idem.Operator: one TransactWriteItems that deletes the
// record, conditional on the record the operator saw, and leaves a forget
// note with f.Audit under "<namespace>#forgotten#<key>" (see GetForgotten),
// kept until the record's own retention would have ended.
func (a *Admin) Forget(ctx context.Context, prev idem.Record, f idem.Forget) (idem.Record, bool, error) {
	if len(f.Audit) > idem.MaxAudit {
		return idem.Record{}, false, idem.Permanent(fmt.Errorf("ddbstore: audit is %d bytes; a note holds at most %d", len(f.Audit), idem.MaxAudit))
	}
	if idem.Forgettable(prev, f) != nil {
		rec, err := a.current(ctx, prev.Key, f.Now)
		return rec, false, err
	}
	swap, _, leaseNames := operatorSwapOn(prev, f.Now)
	swap = swap.and("(#status <> :in_progress OR #lease_until <= :now_ms)", leaseNames,
		map[string]types.AttributeValue{":in_progress": str(string(idem.StatusInProgress)), ":now_ms": ms(f.Now)})
	_, err := a.admin.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Delete: &types.Delete{
			TableName: &a.table,
			Key:       keyOfPK(a.pk(prev.Key)),
			// The compare-and-swap of Release, with the forget rule: never
			// under a live lease.
			ConditionExpression:                 &swap.expr,
			ExpressionAttributeNames:            swap.names,
			ExpressionAttributeValues:           swap.values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
		{Put: &types.Put{TableName: &a.table, Item: a.forgetNoteItem(prev, f)}},
	}})
	if err == nil {
		return prev, true, nil
	}
	if tce, ok := errors.AsType[*types.TransactionCanceledException](err); ok && len(tce.CancellationReasons) > 0 &&
		aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" {
		return a.forgetRefused(ctx, prev, f, tce.CancellationReasons[0].Item)
	}
	return idem.Record{}, false, a.classify("TransactWriteItems", err)
}

// forgetRefused settles a forget whose delete failed its condition: item is
// what the server returned of the record (perhaps nothing). The forget
// happened after all if our own note is there.
func (a *Admin) forgetRefused(ctx context.Context, prev idem.Record, f idem.Forget, item map[string]types.AttributeValue) (idem.Record, bool, error) {
	cur, err := a.found(ctx, item, prev.Key, f.Now)
	if err != nil || f.Token == "" {
		return cur, false, err
	}
	// DynamoDB recognises a re-sent transaction by its ClientRequestToken
	// (the SDK sets one) for 10 minutes; moto does not. Either way, our own
	// note under our token says the forget happened, even if the key has
	// been reserved afresh since.
	note, found, err := a.GetForgotten(ctx, prev.Key, f.Now)
	if err != nil {
		return cur, false, err
	}
	if found && note.Token == f.Token {
		return prev, true, nil
	}
	return cur, false, nil
}

// ForgetNote is what a forget left behind: the record's state when it was
// deleted, and the operator's audit (who, when, why).
type ForgetNote struct {
	Key         string
	Status      idem.Status // the forgotten record's status
	ErrorCode   idem.Code
	Fingerprint string
	Attempts    int
	At          time.Time
	ExpiresAt   time.Time
	Audit       string
	Token       string // the forget's token (idem.Forget.Token), if it had one
}

// GetForgotten returns the forget note for key, with found false if there
// is none or it has expired at now.
func (a *Admin) GetForgotten(ctx context.Context, key string, now time.Time) (ForgetNote, bool, error) {
	out, err := a.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &a.table,
		Key:            keyOfPK(a.forgottenPK(key)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return ForgetNote{}, false, a.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return ForgetNote{}, false, nil
	}
	note, err := decodeForgetNote(out.Item, key)
	if err != nil {
		return ForgetNote{}, false, err
	}
	if !now.Before(note.ExpiresAt) {
		return ForgetNote{}, false, nil
	}
	return note, true, nil
}

// classify is Store.classify, plus the one refusal an operator meets on an
// older table: a query of an index it does not have (see missingIndex).
func (a *Admin) classify(op string, err error) error {
	if op == "Query" && missingIndex(err) {
		return idem.Permanent(fmt.Errorf("dynamodb table %q has no index %q (it predates oncelyctl; deploy the current template.yaml, or list with --scan): %w", a.table, IndexTriage, err))
	}
	return a.Store.classify(op, err)
}

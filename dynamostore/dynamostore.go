// Package dynamostore is the DynamoDB store for package oncely: the one
// that makes the engine's guarantees hold across processes, machines and
// Lambda invocations. It is for a team that runs oncely on AWS and keeps
// its idempotency records in a DynamoDB table of its own.
//
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "orders-idempotency",
//		dynamostore.Options{Namespace: "orders"})
//	...
//	if err := store.Check(ctx); err != nil { ... } // at init: the table exists and the role may read it
//	engine, err := oncely.New(store, oncely.Options{})
//
// # What it promises
//
// Every write of a record is one conditional request: a reservation is a
// PutItem that admits a fresh key or an expired record, a take-over a
// PutItem that compares and swaps the previous owner's token, a completion
// or a failure an UpdateItem fenced by the owner's token. A duplicate costs
// one request (the failed condition returns the stored item; a consistent
// GetItem is the fallback for servers that omit it). The store never
// retries: the SDK's retryer retries throttling and 5xx, and the engine
// owns the policy. Every error it returns is classified for the engine:
// throttling and 5xx are transient; a missing table, a denied permission or
// another key schema are permanent, with a message that names the table
// and what is missing; a write whose reply was lost is outcome-unknown.
// It is safe for concurrent use, and it holds no endpoint logic: the SDK
// honours AWS_ENDPOINT_URL_DYNAMODB.
//
// # The table contract
//
// What a team's template must declare for the table the store uses:
//
//   - Hash key [KeyAttribute] ("pk"), of type S, and no range key. The
//     store writes "<namespace>#<key>" there.
//   - TTL on [TTLAttribute] ("expires_at", epoch seconds). The store checks
//     expiry itself in every condition and read (TTL deletes lazily, often
//     days late), so TTL is what keeps the table from growing, not what
//     makes expiry correct. [Store.Check] does not check it: that would
//     need dynamodb:DescribeTimeToLive, which [RequiredIAMActions] does not
//     list.
//   - Any billing mode. PAY_PER_REQUEST suits the spiky traffic of
//     redeliveries.
//   - The function's role: exactly [RequiredIAMActions] on the table's ARN.
//     With [Effects], also each effect's own action on its table (a Put
//     needs dynamodb:PutItem there, an Update dynamodb:UpdateItem, ...).
//
// The table may be shared by several functions, each with its own
// Namespace. Other attributes the store writes (status, token, result,
// "triage" and "triage_sk" on failures and poison notes, ...) are
// described in the project's docs/table.md; don't declare an index that
// gives them another type.
//
// # Namespace
//
// [Options.Namespace] is required, and it is part of every stored key:
// changing it re-keys every record, so an event already handled would run
// again. It has no default on purpose: a default derived from the
// function's name would silently re-key everything on a rename or a
// refactor (Powertools' idempotency utilities had exactly that complaint,
// and each runtime added an explicit prefix). Choose a name for what the
// function does ("orders", "billing-notify") and keep it.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/internal/ddbstore"
)

// The table contract's attribute names (see the package doc).
const (
	// KeyAttribute is the table's hash key, of type S.
	KeyAttribute = ddbstore.AttrPK
	// TTLAttribute is the attribute the table's TTL must name (epoch
	// seconds).
	TTLAttribute = ddbstore.TTLAttribute
)

// MaxEffects is the most writes one completion commits besides the
// record's own: a DynamoDB transaction holds 100 items.
const MaxEffects = ddbstore.MaxEffects

// Client is the part of *dynamodb.Client the store uses. Any wrapper (for
// counting, tracing or delaying calls) that keeps the semantics will do,
// if it writes nothing into a request: requests share maps between
// concurrent calls. [Effects] also need TransactWriteItems, with
// *dynamodb.Client's signature; a client without it refuses them
// (INVALID_EFFECTS).
type Client interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Options configure a Store.
type Options struct {
	// Namespace prefixes every key the store writes ("<namespace>#<key>").
	// Required, non-empty, without '#'. It has no default: changing it
	// re-keys every record (see the package doc), so it must not follow
	// the function's name.
	Namespace string
}

// Store is a driver.Store, driver.EffectStore and driver.PoisonStore on
// one DynamoDB table. It is safe for concurrent use.
type Store struct {
	s *ddbstore.Store
}

// New returns a Store on table (a name or an ARN).
func New(client Client, table string, o Options) (*Store, error) {
	switch {
	case client == nil:
		return nil, errors.New("dynamostore: a client is required")
	case table == "":
		return nil, errors.New("dynamostore: a table name is required")
	case o.Namespace == "":
		return nil, errors.New("dynamostore: Options.Namespace is required: it prefixes every stored key; choose a name that outlives the function's (a rename would re-key every record)")
	case strings.Contains(o.Namespace, "#"):
		return nil, fmt.Errorf("dynamostore: Options.Namespace %q must not contain '#' (it separates the namespace from the key)", o.Namespace)
	}
	s, err := ddbstore.New(client, table, o.Namespace)
	if err != nil {
		return nil, err
	}
	return &Store{s: s}, nil
}

// RequiredIAMActions are exactly the IAM actions the store calls on its
// table: what the function's role needs on the table's ARN. Effects need,
// besides, each write's own action on its own table.
func RequiredIAMActions() []string { return slices.Clone(ddbstore.RequiredIAMActions()) }

// Check reads the table once, with one eventually consistent GetItem of an
// item no write makes (half a read unit), to learn at init whether the
// table exists, the caller may read it, and its key schema is the store's.
// Its error is permanent for a refusal a retry will not fix (a missing
// table, a denied dynamodb:GetItem, another key schema), with a message
// naming the table and what is missing; transient for an outage, which
// should only be logged: it must not stop a cold start. Classify it with
// oncely.Classify. It does not check TTL (see the package doc).
func (s *Store) Check(ctx context.Context) error { return s.s.Probe(ctx) }

// Reserve implements driver.Store with one conditional PutItem.
func (s *Store) Reserve(ctx context.Context, r driver.Reservation) (driver.Record, bool, error) {
	return s.s.Reserve(ctx, r)
}

// TakeOver implements driver.Store with one PutItem that compares and
// swaps the previous owner's token.
func (s *Store) TakeOver(ctx context.Context, prev driver.Record, r driver.Reservation) (driver.Record, bool, error) {
	return s.s.TakeOver(ctx, prev, r)
}

// Complete implements driver.Store: one UpdateItem fenced by the token.
// Results above 32 KiB are gzipped; one that does not fit in an item even
// then is stored as a RESULT_TOO_LARGE failure.
func (s *Store) Complete(ctx context.Context, f driver.Finish) error { return s.s.Complete(ctx, f) }

// Fail implements driver.Store: one UpdateItem fenced by the token.
func (s *Store) Fail(ctx context.Context, f driver.Finish) error { return s.s.Fail(ctx, f) }

// Get implements driver.Store with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (driver.Record, bool, error) {
	return s.s.Get(ctx, key, now)
}

// RecordPoison implements driver.PoisonRecorder: a plain PutItem of a note
// under "<namespace>#poison#<id>", never with the message's body.
func (s *Store) RecordPoison(ctx context.Context, p driver.Poison) error {
	return s.s.RecordPoison(ctx, p)
}

// GetPoison implements driver.PoisonStore with a strongly consistent
// GetItem.
func (s *Store) GetPoison(ctx context.Context, id string, now time.Time) (driver.Poison, bool, error) {
	return s.s.GetPoison(ctx, id, now)
}

// Effects are an action's writes in DynamoDB's terms: Put, Update, Delete
// or ConditionCheck transaction items, on any table the function may
// write, each with its own condition if it needs one. The store commits
// them with the record's completion in one TransactWriteItems: either
// both happen or neither does.
//
// The store checks the limits it can before sending: at most [MaxEffects]
// writes, each item and the whole under DynamoDB's sizes, no write to the
// record itself, and no two writes to one item, which it recognises by
// the key attributes pk (and sk); a table keyed otherwise relies on
// DynamoDB's own check, whose refusal is reported the same way
// (INVALID_EFFECTS). A failed condition of one of the writes is a
// permanent EFFECT_CONDITION_FAILED naming the item.
type Effects []types.TransactWriteItem

// Len implements driver.Effects.
func (e Effects) Len() int { return len(e) }

// CompleteWithEffects implements driver.EffectStore with one
// TransactWriteItems: the record's completion (fenced by the token, and
// only from IN_PROGRESS), then effects, which must be [Effects]. A repeat
// after a lost reply is safe: it carries the same ClientRequestToken, and
// where that does not help the record read back says whether the first
// attempt committed.
func (s *Store) CompleteWithEffects(ctx context.Context, f driver.Finish, effects driver.Effects) error {
	eff, ok := effects.(Effects)
	if !ok {
		return driver.PermanentCode(driver.CodeInvalidEffects,
			fmt.Errorf("the action's writes are %T; the DynamoDB store commits dynamostore.Effects", effects))
	}
	// The implementation's own name for the same list.
	return s.s.CompleteWithEffects(ctx, f, ddbstore.Effects(eff))
}

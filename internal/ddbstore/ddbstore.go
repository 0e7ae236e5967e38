// Package ddbstore is the DynamoDB driver for idem.Store: the one that makes
// the engine's guarantees hold across processes and machines. It is the
// implementation of the public package dynamostore (which wraps Store and
// adds nothing to its behaviour), plus what only this module needs: the
// operators' Admin, listings, capacity estimates and CreateTable.
//
// Every write of a record is one conditional request (poison and forget
// notes are plain puts under keys of their own). A reservation is a PutItem that
// admits a fresh key or an expired record; a take-over is a PutItem that
// compares and swaps the previous owner's token; completion is an UpdateItem
// fenced by the owner's token. A duplicate costs one request: a failed
// condition returns the existing item (ALL_OLD), with a consistent GetItem as
// the fallback for servers that omit it.
//
// The driver classifies errors (see classify) and never retries: the SDK's
// retryer already retries throttling and 5xx, and the engine owns the policy.
// It contains no endpoint logic; the SDK honours AWS_ENDPOINT_URL_DYNAMODB.
package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/idem"
)

// Attribute names: the table contract in docs/table.md. TTLAttribute is the
// table's TTL attribute; the SAM template must name the same one.
const (
	AttrPK          = "pk"
	AttrStatus      = "status"
	AttrFingerprint = "fingerprint"
	AttrAttempts    = "attempts"
	AttrToken       = "token"
	AttrLeaseUntil  = "lease_until" // epoch milliseconds
	// AttrHoldUntil is a retryable failure's hold-off (idem.Record.HoldUntil),
	// epoch milliseconds; absent when there is none. Fail writes it; Reserve,
	// TakeOver and an operator's Release write whole items without it.
	AttrHoldUntil  = "hold_until"
	AttrExpiresAt  = "expires_at" // epoch seconds
	AttrResult     = "result"     // B
	AttrResultEnc  = "result_encoding"
	AttrErrorCode  = "error_code"
	AttrErrorMsg   = "error_message"
	AttrRetryable  = "retryable"
	AttrCreatedAt  = "created_at" // epoch milliseconds
	AttrUpdatedAt  = "updated_at" // epoch milliseconds
	AttrReason     = "reason"     // poison notes
	AttrBodySHA256 = "body_sha256"
	AttrDetail     = "detail"
	AttrBodySize   = "body_size"
	AttrPoisonKey  = "event_key" // poison notes, when the message gave a key; absent in older notes
	TTLAttribute   = AttrExpiresAt
	StatusPoison   = "POISON"
	encodingGzip   = "gzip"
	encodingNone   = "none"
)

// Item size limits. DynamoDB's limit is 400 KB, attribute names included.
const (
	// MaxItemBytes is DynamoDB's 400 KB read as 400,000 bytes: moto
	// enforces 405,000, and a margin costs nothing.
	MaxItemBytes = 400_000
	// itemOverhead bounds everything in a record but the result: names,
	// the key, status, fingerprint, token, numbers and an operator's audit.
	itemOverhead = 1024 + idem.MaxAudit
	// CompressAbove is the result size from which results are gzipped.
	CompressAbove = 32 * 1024
)

// Client is the part of *dynamodb.Client the store uses. Any wrapper (for
// counting or delaying calls) that keeps the semantics will do, if it
// writes nothing into a request: its ExpressionAttributeNames are shared by
// concurrent calls (see codec.go).
type Client interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// Store is an idem.Store on one DynamoDB table. It is safe for concurrent use.
type Store struct {
	client    Client
	table     string
	namespace string
	caller    string // who needs a denied permission, for errors: the function's role, or an operator's credentials
}

// New returns a Store on table, with keys stored as "<namespace>#<key>".
func New(client Client, table, namespace string) (*Store, error) {
	switch {
	case client == nil:
		return nil, errors.New("ddbstore: client is required")
	case table == "":
		return nil, errors.New("ddbstore: table name is required")
	case namespace == "" || strings.Contains(namespace, "#"):
		return nil, fmt.Errorf("ddbstore: namespace %q must be non-empty and must not contain '#'", namespace)
	}
	return &Store{client: client, table: table, namespace: namespace}, nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.table }

// condition is a condition expression with the names and values it uses.
// Its names are one of the shared read-only maps of codec.go; its values
// are its own: no two conditions share a map that is written.
type condition struct {
	expr   string
	names  map[string]string
	values map[string]types.AttributeValue
}

// swapOn is the compare-and-swap of every write on a record the caller has
// read (a take-over, an operator's release or forget): the stored record
// still has prev's token, status and attempts, and is unexpired at now.
// Each caller adds its own rule with and, re-checked on the stored values.
func swapOn(prev idem.Record, now time.Time) condition {
	return condition{
		expr:  "#token = :prev_token AND #status = :prev_status AND #attempts = :prev_attempts AND #expires_at > :now_s",
		names: swapNames,
		values: map[string]types.AttributeValue{
			":prev_token":    str(prev.Token),
			":prev_status":   str(string(prev.Status)),
			":prev_attempts": n(int64(prev.Attempts)),
			":now_s":         n(now.Unix()),
		},
	}
}

// and returns c AND rule. attrNames names every attribute of the whole
// expression (one of codec.go's maps); the values are c's and rule's, in a
// map of the new condition's own, so c is left as it was.
func (c condition) and(rule string, attrNames map[string]string, values map[string]types.AttributeValue) condition {
	v := make(map[string]types.AttributeValue, len(c.values)+len(values))
	maps.Copy(v, c.values)
	maps.Copy(v, values)
	return condition{expr: c.expr + " AND " + rule, names: attrNames, values: v}
}

// Reserve implements idem.Store with one conditional PutItem.
func (s *Store) Reserve(ctx context.Context, r idem.Reservation) (idem.Record, bool, error) {
	item := s.item(reserved(r))
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table,
		Item:      item,
		// Expired records count as absent: TTL deletion lags by up to days.
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR #expires_at <= :now_s"),
		ExpressionAttributeNames:            reserveNames,
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now_s": n(r.Now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		rec, _ := decode(item, s.namespace)
		return rec, true, nil
	}
	return s.conflict(ctx, "PutItem", r, err)
}

// conflict turns a write's error into the record that blocked it.
func (s *Store) conflict(ctx context.Context, op string, r idem.Reservation, err error) (idem.Record, bool, error) {
	ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	if !ok {
		return idem.Record{}, false, s.classify(op, err)
	}
	var rec idem.Record
	found := len(ccf.Item) > 0
	if found {
		if rec, err = decode(ccf.Item, s.namespace); err != nil {
			return idem.Record{}, false, err
		}
	} else {
		// Some servers omit Item on a failed condition: read it, strongly consistent.
		if rec, found, err = s.Get(ctx, r.Key, r.Now); err != nil {
			return idem.Record{}, false, err
		}
	}
	if !found || rec.Expired(r.Now) {
		return idem.Record{}, false, nil
	}
	// Our own write landed on an earlier try (the SDK re-sent it after a
	// lost reply) and the re-send failed its condition: we are the owner.
	if rec.Token == r.Token && rec.Status == idem.StatusInProgress {
		return rec, true, nil
	}
	return rec, false, nil
}

// TakeOver implements idem.Store with one PutItem that compares and swaps
// the previous owner's token. Replacing the whole item drops the old
// failure fields (and the triage index key) without a REMOVE clause; the
// operators' audit is carried forward.
func (s *Store) TakeOver(ctx context.Context, prev idem.Record, r idem.Reservation) (idem.Record, bool, error) {
	rec := idem.Record{
		Key: r.Key, Status: idem.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: prev.Attempts + 1,
		Token: r.Token, LeaseUntil: r.LeaseUntil, ExpiresAt: time.Unix(epochSeconds(r.ExpiresAt), 0),
		CreatedAt: time.UnixMilli(prev.CreatedAt.UnixMilli()), UpdatedAt: time.UnixMilli(r.Now.UnixMilli()),
		// The swap below holds only on prev's token, and an audit changes
		// only with the token (a release writes a new one): prev's audit is
		// the stored one.
		Audit: prev.Audit,
	}
	item := s.item(rec)
	// A held-off failure (its last request may still be with the receiver)
	// is refused until the hold ends, judged on the stored value: a caller
	// that read the record before the hold was written, or ignores it,
	// cannot take the key over early.
	swap := swapOn(prev, r.Now).and("#fingerprint = :fp AND "+
		"((#status = :in_progress AND #lease_until <= :now_ms) OR "+
		"(#status = :failed AND #retryable = :true AND (attribute_not_exists(#hold_until) OR #hold_until <= :now_ms)))",
		takeOverNames,
		map[string]types.AttributeValue{
			":fp":          str(r.Fingerprint),
			":in_progress": str(string(idem.StatusInProgress)),
			":failed":      str(string(idem.StatusFailed)),
			":now_ms":      ms(r.Now),
			":true":        &types.AttributeValueMemberBOOL{Value: true},
		})
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.table,
		Item:      item,
		// The swap holds only if nobody changed the record since the engine
		// judged it claimable (same token, status and attempts), and the
		// claimable rule is re-checked against the stored values.
		ConditionExpression:                 &swap.expr,
		ExpressionAttributeNames:            swap.names,
		ExpressionAttributeValues:           swap.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		// What was written, as Get reads it back (the lease at milliseconds).
		rec, _ := decode(item, s.namespace)
		return rec, true, nil
	}
	return s.conflict(ctx, "PutItem", r, err)
}

// Complete implements idem.Store: one UpdateItem fenced by the token.
func (s *Store) Complete(ctx context.Context, f idem.Finish) error {
	result, enc, err := encodeResult(f.Result, len(s.pk(f.Key)))
	if err != nil {
		return err
	}
	return s.finish(ctx, f, completeExpression, completeNames, completeValues(f, result, enc))
}

// Fail implements idem.Store: one UpdateItem fenced by the token. It puts
// the record in the triage index (see admin.go), and writes the hold-off
// when there is one.
func (s *Store) Fail(ctx context.Context, f idem.Finish) error {
	if !f.HoldUntil.IsZero() {
		v := s.failValues(f)
		v[":hold"] = ms(f.HoldUntil)
		return s.finish(ctx, f, failHeldExpression, failHeldNames, v)
	}
	return s.finish(ctx, f, failExpression, failNames, s.failValues(f))
}

// finish runs a finishing update (values from finishValues) fenced by the
// token.
func (s *Store) finish(ctx context.Context, f idem.Finish, update string, attrNames map[string]string, values map[string]types.AttributeValue) error {
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        &s.table,
		Key:              keyOfPK(s.pk(f.Key)),
		UpdateExpression: &update,
		// Fenced: only the current owner writes. A worker whose lease was
		// taken over must never overwrite the new owner's record, and a
		// missing record is never created by a completion.
		ConditionExpression:       aws.String("#token = :token"),
		ExpressionAttributeNames:  attrNames,
		ExpressionAttributeValues: values,
	})
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		return idem.ErrLeaseLost
	}
	return s.classify("UpdateItem", err)
}

// Get implements idem.Store with a strongly consistent GetItem.
func (s *Store) Get(ctx context.Context, key string, now time.Time) (idem.Record, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            keyOfPK(s.pk(key)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return idem.Record{}, false, s.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return idem.Record{}, false, nil
	}
	rec, err := decode(out.Item, s.namespace)
	if err != nil {
		return idem.Record{}, false, err
	}
	if rec.Expired(now) {
		return idem.Record{}, false, nil
	}
	return rec, true, nil
}

// Probe reads an item no write ever makes ("<namespace>#probe": record
// keys hold no '#'), with one eventually consistent GetItem (half a read
// unit), to learn whether the table exists, the caller may read it and its
// key schema is the store's. Its error is classified as every call's is:
// permanent for a refusal a retry will not fix (ResourceNotFoundException,
// AccessDeniedException, ValidationException for another key schema),
// transient for an outage.
func (s *Store) Probe(ctx context.Context) error {
	_, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.table,
		Key:       keyOfPK(s.namespace + "#probe"),
	})
	if err != nil {
		return s.classify("GetItem", err)
	}
	return nil
}

// RecordPoison implements idem.PoisonRecorder: a note under
// "<namespace>#poison#<id>" with the reason, the key if the message gave
// one, a bounded description and the body's SHA-256 and size, never the body. Its size is bounded whatever the
// message held: the id is SQS's (at most 100 characters), the description
// at most idem.MaxPoisonDetail bytes. Writing the same note twice is
// harmless, so the put is plain. The note is in the triage index.
func (s *Store) RecordPoison(ctx context.Context, p idem.Poison) error {
	_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: s.poisonItem(p)})
	if err != nil {
		return s.classify("PutItem", err)
	}
	return nil
}

// GetPoison implements idem.PoisonStore with a strongly consistent GetItem.
func (s *Store) GetPoison(ctx context.Context, id string, now time.Time) (idem.Poison, bool, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            keyOfPK(s.poisonPK(id)),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return idem.Poison{}, false, s.classify("GetItem", err)
	}
	if len(out.Item) == 0 {
		return idem.Poison{}, false, nil
	}
	p, err := decodePoison(out.Item, s.namespace)
	if err != nil || !now.Before(p.ExpiresAt) {
		return idem.Poison{}, false, err
	}
	return p, true, nil
}

package ddbstore

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/idem"
)

// This file is the table's one codec: the keys, the items and updates
// every write sends, the expression names every request uses, the decoding
// of every item a read returns, and the triage index's key. A new attribute
// is added here once, for its write and its read.

func (s *Store) pk(key string) string { return s.namespace + "#" + key }

func (s *Store) poisonPK(id string) string { return s.namespace + "#poison#" + id }

func (s *Store) forgottenPK(key string) string { return s.namespace + "#forgotten#" + key }

// keyOfPK is the primary key of the item under pk, for GetItem, UpdateItem
// and Delete.
func keyOfPK(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: str(pk)}
}

// names maps the expression placeholders to attribute names; several of
// them (status, token) are DynamoDB reserved words.
func names(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = a
	}
	return m
}

// swapAttrs are the attributes of swapOn's compare-and-swap.
var swapAttrs = []string{AttrToken, AttrStatus, AttrAttempts, AttrExpiresAt}

// failureRuleAttrs are the attributes of a FAILED record that the
// operator's rules read (idem.StillAsRead), which operatorSwapOn adds.
var failureRuleAttrs = []string{AttrErrorCode, AttrRetryable}

// The expression names of each request. They are the same on every call,
// so each map is built once, here, and then shared by every call at once
// (under Lambda Managed Instances many invocations run concurrently in one
// process): nothing may write into them. The SDK only reads a request's
// ExpressionAttributeNames (aws-sdk-go-v2 service/dynamodb v1.74's
// serializer ranges over the map), and so must every Client wrapper.
var (
	reserveNames  = names(AttrPK, AttrExpiresAt)
	completeNames = names(AttrStatus, AttrToken, AttrAttempts, AttrExpiresAt, AttrUpdatedAt, AttrResult, AttrResultEnc)
	failNames     = names(AttrStatus, AttrToken, AttrAttempts, AttrExpiresAt, AttrUpdatedAt,
		AttrErrorCode, AttrErrorMsg, AttrRetryable, AttrTriage, AttrTriageSK)
	failHeldNames = names(AttrStatus, AttrToken, AttrAttempts, AttrExpiresAt, AttrUpdatedAt,
		AttrErrorCode, AttrErrorMsg, AttrRetryable, AttrTriage, AttrTriageSK, AttrHoldUntil)
	swapNames      = names(swapAttrs...)
	swapLeaseNames = names(slices.Concat(swapAttrs, []string{AttrLeaseUntil})...)
	// An operator's compare-and-swap on a FAILED record also states the
	// failure's fields (see operatorSwapOn).
	failedSwapNames      = names(slices.Concat(swapAttrs, failureRuleAttrs)...)
	failedSwapLeaseNames = names(slices.Concat(swapAttrs, failureRuleAttrs, []string{AttrLeaseUntil})...)
	takeOverNames        = names(slices.Concat(swapAttrs, []string{AttrFingerprint, AttrLeaseUntil, AttrRetryable, AttrHoldUntil})...)
	triageNames          = names(AttrTriage)
)

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func ms(t time.Time) types.AttributeValue {
	return n(t.UnixMilli())
}

// epochSeconds rounds up, so that retention is never shortened. Expiry is
// then "now >= expires_at", which holds exactly when floor(now) >= expires_at:
// conditions compare against floor(now) in seconds.
func epochSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.After(time.Unix(s, 0)) {
		s++
	}
	return s
}

type triageKind string

const (
	triageFailed triageKind = "FAILED"
	triagePoison triageKind = "POISON"
)

// shardOf spreads ids over the triage shards (FNV-1a).
func shardOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id)) // a hash never fails to write
	return int(h.Sum32() % TriageShards)
}

func (s *Store) triagePK(kind triageKind, shard int) string {
	return fmt.Sprintf("%s#%s#%d", s.namespace, kind, shard)
}

func triageSortKey(at time.Time, id string) string {
	return fmt.Sprintf("%013d#%s", at.UnixMilli(), id)
}

// triageKey returns the triage index's key for an item of kind about id
// (a record's key or a poison note's message id) written at at.
func (s *Store) triageKey(kind triageKind, id string, at time.Time) (pk, sk types.AttributeValue) {
	return str(s.triagePK(kind, shardOf(id))), str(triageSortKey(at, id))
}

// reserved is the record a reservation writes: attempt 1, in progress.
func reserved(r idem.Reservation) idem.Record {
	return idem.Record{
		Key: r.Key, Status: idem.StatusInProgress, Fingerprint: r.Fingerprint, Attempts: 1,
		Token: r.Token, LeaseUntil: r.LeaseUntil, ExpiresAt: r.ExpiresAt, CreatedAt: r.Now, UpdatedAt: r.Now,
	}
}

// item encodes a record without a result (IN_PROGRESS, or FAILED): the
// inverse of decode for those records. Reserve, TakeOver and Release write
// whole items with it. A FAILED record gets the triage index's key.
func (s *Store) item(rec idem.Record) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		AttrPK:          str(s.pk(rec.Key)),
		AttrStatus:      str(string(rec.Status)),
		AttrFingerprint: str(rec.Fingerprint),
		AttrAttempts:    n(int64(rec.Attempts)),
		AttrToken:       str(rec.Token),
		AttrLeaseUntil:  ms(rec.LeaseUntil),
		AttrExpiresAt:   n(epochSeconds(rec.ExpiresAt)),
		AttrCreatedAt:   ms(rec.CreatedAt),
		AttrUpdatedAt:   ms(rec.UpdatedAt),
	}
	if rec.Status == idem.StatusFailed {
		item[AttrErrorCode] = str(string(rec.ErrorCode))
		item[AttrErrorMsg] = str(rec.ErrorMessage)
		item[AttrRetryable] = &types.AttributeValueMemberBOOL{Value: rec.Retryable}
		item[AttrTriage], item[AttrTriageSK] = s.triageKey(triageFailed, rec.Key, rec.UpdatedAt)
		if !rec.HoldUntil.IsZero() {
			item[AttrHoldUntil] = ms(rec.HoldUntil)
		}
	}
	if rec.Audit != "" {
		item[AttrAudit] = str(rec.Audit)
	}
	return item
}

// completeExpression is the update that completes a record, for Complete
// and CompleteWithEffects alike. The record was written whole by Reserve or
// TakeOver with no result or failure fields, so nothing needs removing.
// Its names are completeNames.
const completeExpression = "SET #status = :succeeded, #result = :result, #result_encoding = :enc, " +
	"#attempts = :attempts, #expires_at = :expires, #updated_at = :now_ms"

// completeValues are completeExpression's values, and the token it is
// fenced by.
func completeValues(f idem.Finish, result types.AttributeValue, enc string) map[string]types.AttributeValue {
	v := finishValues(f)
	v[":succeeded"], v[":result"], v[":enc"] = str(string(idem.StatusSucceeded)), result, str(enc)
	return v
}

// failExpression is the update that fails a record and puts it in the
// triage index (see admin.go). Its names are failNames.
const failExpression = "SET #status = :failed, #error_code = :code, #error_message = :msg, #retryable = :retryable, " +
	"#attempts = :attempts, #expires_at = :expires, #updated_at = :now_ms, #triage = :triage, #triage_sk = :triage_sk"

// failHeldExpression is failExpression with a hold-off (idem.Finish.HoldUntil,
// value :hold). Its names are failHeldNames.
const failHeldExpression = failExpression + ", #hold_until = :hold"

// failValues are failExpression's values, and the token it is fenced by.
func (s *Store) failValues(f idem.Finish) map[string]types.AttributeValue {
	v := finishValues(f)
	v[":failed"], v[":code"], v[":msg"] = str(string(idem.StatusFailed)), str(string(f.ErrorCode)), str(f.ErrorMessage)
	v[":retryable"] = &types.AttributeValueMemberBOOL{Value: f.Retryable}
	v[":triage"], v[":triage_sk"] = s.triageKey(triageFailed, f.Key, f.Now)
	return v
}

// finishValues are the values every finishing write sets: the fencing
// token, the attempt count, the retention and the time.
func finishValues(f idem.Finish) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		":token":    str(f.Token),
		":attempts": n(int64(f.Attempts)),
		":expires":  n(epochSeconds(f.ExpiresAt)),
		":now_ms":   ms(f.Now),
	}
}

// poisonItem is a poison note: never the body, only its digest and size.
// It is in the triage index.
func (s *Store) poisonItem(p idem.Poison) map[string]types.AttributeValue {
	triage, triageSK := s.triageKey(triagePoison, p.ID, p.At)
	item := map[string]types.AttributeValue{
		AttrPK:         str(s.poisonPK(p.ID)),
		AttrStatus:     str(StatusPoison),
		AttrReason:     str(string(p.Reason)),
		AttrDetail:     str(p.Detail),
		AttrBodySHA256: str(p.BodySHA256),
		AttrBodySize:   n(int64(p.BodySize)),
		AttrExpiresAt:  n(epochSeconds(p.ExpiresAt)),
		AttrCreatedAt:  ms(p.At),
		AttrUpdatedAt:  ms(p.At),
		AttrTriage:     triage,
		AttrTriageSK:   triageSK,
	}
	if p.Key != "" {
		item[AttrPoisonKey] = str(p.Key)
	}
	return item
}

// forgetNoteItem is the note a forget of prev leaves (see GetForgotten),
// kept until the record's own retention would have ended.
func (s *Store) forgetNoteItem(prev idem.Record, f idem.Forget) map[string]types.AttributeValue {
	note := map[string]types.AttributeValue{
		AttrPK:              str(s.forgottenPK(prev.Key)),
		AttrStatus:          str(StatusForgotten),
		AttrForgottenStatus: str(string(prev.Status)),
		AttrFingerprint:     str(prev.Fingerprint),
		AttrAttempts:        n(int64(prev.Attempts)),
		AttrErrorCode:       str(string(prev.ErrorCode)),
		AttrExpiresAt:       n(epochSeconds(prev.ExpiresAt)),
		AttrCreatedAt:       ms(f.Now),
		AttrUpdatedAt:       ms(f.Now),
	}
	if f.Audit != "" {
		note[AttrAudit] = str(f.Audit)
	}
	if f.Token != "" {
		note[AttrToken] = str(f.Token)
	}
	return note
}

// decodeForgetNote reads the forget note for key.
func decodeForgetNote(item map[string]types.AttributeValue, key string) (ForgetNote, error) {
	d := decoder{item: item}
	note := ForgetNote{
		Key: key, Status: idem.Status(d.s(AttrForgottenStatus)), ErrorCode: idem.Code(d.s(AttrErrorCode)),
		Fingerprint: d.s(AttrFingerprint), Attempts: int(d.n(AttrAttempts)), At: time.UnixMilli(d.n(AttrCreatedAt)),
		ExpiresAt: time.Unix(d.n(AttrExpiresAt), 0), Audit: d.s(AttrAudit), Token: d.s(AttrToken),
	}
	if d.err != nil {
		return ForgetNote{}, idem.Permanent(fmt.Errorf("ddbstore: malformed forget note for %q: %w", key, d.err))
	}
	return note, nil
}

// decodePoison reads a poison note item.
func decodePoison(item map[string]types.AttributeValue, namespace string) (idem.Poison, error) {
	d := decoder{item: item}
	pk := d.s(AttrPK)
	p := idem.Poison{
		ID:         strings.TrimPrefix(pk, namespace+"#poison#"),
		Key:        d.s(AttrPoisonKey),
		Reason:     idem.Code(d.s(AttrReason)),
		Detail:     d.s(AttrDetail),
		BodySHA256: d.s(AttrBodySHA256),
		BodySize:   int(d.n(AttrBodySize)),
		At:         time.UnixMilli(d.n(AttrCreatedAt)),
		ExpiresAt:  time.Unix(d.n(AttrExpiresAt), 0),
	}
	if d.err != nil {
		return idem.Poison{}, idem.Permanent(fmt.Errorf("ddbstore: malformed poison note %q: %w", pk, d.err))
	}
	return p, nil
}

// encodeResult stores a result as S when it is valid UTF-8 (readable by
// operators; JSON always is), as B otherwise, and gzipped as B from
// CompressAbove bytes on. It enforces the item size limit.
func encodeResult(result []byte, keyLen int) (types.AttributeValue, string, error) {
	if len(result) <= CompressAbove {
		if utf8.Valid(result) {
			return str(string(result)), encodingNone, nil
		}
		return &types.AttributeValueMemberB{Value: result}, encodingNone, nil
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(result) // writes to a bytes.Buffer do not fail
	_ = zw.Close()
	if limit := MaxItemBytes - itemOverhead - keyLen; buf.Len() > limit {
		return nil, "", idem.PermanentCode(idem.CodeResultTooLarge,
			fmt.Errorf("result is %d bytes (%d gzipped); a record holds at most %d bytes (DynamoDB's 400 KB item limit)", len(result), buf.Len(), limit))
	}
	return &types.AttributeValueMemberB{Value: buf.Bytes()}, encodingGzip, nil
}

func decodeResult(b []byte, enc string) ([]byte, error) {
	switch enc {
	case encodingNone, "":
		return b, nil
	case encodingGzip:
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	default:
		return nil, fmt.Errorf("unknown result encoding %q", enc)
	}
}

// decode reads a record item. A malformed item is a permanent error naming
// the attribute: it means the table is shared with something else.
func decode(item map[string]types.AttributeValue, namespace string) (idem.Record, error) {
	d := decoder{item: item}
	pk := d.s(AttrPK)
	rec := idem.Record{
		Key:          strings.TrimPrefix(pk, namespace+"#"),
		Status:       idem.Status(d.s(AttrStatus)),
		Fingerprint:  d.s(AttrFingerprint),
		Attempts:     int(d.n(AttrAttempts)),
		Token:        d.s(AttrToken),
		LeaseUntil:   time.UnixMilli(d.n(AttrLeaseUntil)),
		ExpiresAt:    time.Unix(d.n(AttrExpiresAt), 0),
		ErrorCode:    idem.Code(d.s(AttrErrorCode)),
		ErrorMessage: d.s(AttrErrorMsg),
		CreatedAt:    time.UnixMilli(d.n(AttrCreatedAt)),
		UpdatedAt:    time.UnixMilli(d.n(AttrUpdatedAt)),
		Audit:        d.s(AttrAudit),
	}
	if v, ok := item[AttrRetryable].(*types.AttributeValueMemberBOOL); ok {
		rec.Retryable = v.Value
	}
	if _, ok := item[AttrHoldUntil]; ok {
		rec.HoldUntil = time.UnixMilli(d.n(AttrHoldUntil))
	}
	if v, ok := item[AttrResult]; ok {
		var raw []byte
		switch v := v.(type) {
		case *types.AttributeValueMemberB:
			raw = v.Value
		case *types.AttributeValueMemberS:
			raw = []byte(v.Value)
		default:
			d.bad(AttrResult, "B or S")
		}
		if d.err == nil {
			res, err := decodeResult(raw, d.s(AttrResultEnc))
			if err != nil {
				d.err = fmt.Errorf("attribute %s: %w", AttrResult, err)
			}
			if res == nil {
				res = []byte{}
			}
			rec.Result = res
		}
	}
	if d.err != nil {
		return idem.Record{}, idem.Permanent(fmt.Errorf("ddbstore: malformed record %q: %w", pk, d.err))
	}
	return rec, nil
}

type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) bad(attr, want string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %s is not %s", attr, want)
	}
}

func (d *decoder) s(attr string) string {
	switch v := d.item[attr].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	default:
		d.bad(attr, "a string (S)")
		return ""
	}
}

func (d *decoder) n(attr string) int64 {
	switch v := d.item[attr].(type) {
	case nil:
		return 0
	case *types.AttributeValueMemberN:
		i, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			d.bad(attr, "an integer (N)")
		}
		return i
	default:
		d.bad(attr, "a number (N)")
		return 0
	}
}

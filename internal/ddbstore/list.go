package ddbstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/idem"
)

// DefaultListLimit is the page size of a listing when none is asked for.
const DefaultListLimit = 50

// maxListLimit bounds one page: beyond it, page with the cursor.
const maxListLimit = 1000

// Query selects records or poison notes to list.
type Query struct {
	// Poison lists poison notes instead of records.
	Poison bool
	// Status selects records of one status; empty means every status.
	Status idem.Status
	// Code selects records with this error code, or poison notes with
	// this reason; empty means any.
	Code idem.Code
	// Since and Until bound the last write (updated_at; a poison note's
	// time), both included; zero means unbounded.
	Since, Until time.Time
	// Now judges expiry: expired records count as absent and are left out.
	Now time.Time
	// Scan reads with a Scan even where the triage index serves.
	Scan bool
	// Limit is the page size: zero means DefaultListLimit; at most 1,000.
	Limit int
	// Cursor continues a listing where the Page.Next of the same query left off.
	Cursor string
	// WithPoison, with Status empty and not Poison, also returns the poison
	// notes the same Scan reads (in Page.Poison): one read of the table for
	// both, where two listings would read it twice.
	WithPoison bool
	// Keep, if set, is asked about each record the server returns; a record
	// it refuses is read (and paid for) but not returned, and does not count
	// towards Limit. It selects what a filter expression cannot say in the
	// caller's terms (oncelyctl's states: abandoned is IN_PROGRESS with its
	// lease ended at the operator's clock).
	Keep func(idem.Record) bool
}

// Indexed reports whether the query is served by the triage index (on a
// table that has it): FAILED records and poison notes, unless Scan.
func (q Query) Indexed() bool {
	return !q.Scan && (q.Poison || q.Status == idem.StatusFailed)
}

// Page is one page of a listing.
type Page struct {
	Records []idem.Record
	Poison  []idem.Poison
	// Next continues the listing (Query.Cursor); empty at the end.
	Next string
	Cost Cost
}

// Cost is what a listing read, for operators to see what it costs.
type Cost struct {
	// Method is "query" (the triage index, newest first) or "scan" (the
	// whole table, in table order).
	Method string `json:"method"`
	// Calls is the number of Query or Scan requests.
	Calls int `json:"calls"`
	// ItemsRead is what the server read (ScannedCount): the whole table
	// for a scan, only indexed items for a query.
	ItemsRead int `json:"items_read"`
	// ItemsReturned is what matched.
	ItemsReturned int `json:"items_returned"`
	// CapacityUnits is the read capacity the server reported consuming, if
	// it reported any (CapacityReported).
	CapacityUnits    float64 `json:"capacity_units"`
	CapacityReported bool    `json:"capacity_reported"`
}

// Add adds o to c (for a listing paged to its end).
func (c *Cost) Add(o Cost) {
	if c.Method == "" {
		c.Method = o.Method
	}
	c.Calls += o.Calls
	c.ItemsRead += o.ItemsRead
	c.ItemsReturned += o.ItemsReturned
	c.CapacityUnits += o.CapacityUnits
	c.CapacityReported = c.CapacityReported || o.CapacityReported
}

func (c *Cost) count(scanned int32, cc *types.ConsumedCapacity) {
	c.Calls++
	c.ItemsRead += int(scanned)
	if cc != nil && cc.CapacityUnits != nil {
		c.CapacityUnits += *cc.CapacityUnits
		c.CapacityReported = true
	}
}

// ErrBadCursor means a cursor that no listing of this query returned.
var ErrBadCursor = errors.New("bad cursor")

// Cursors say which way they were made: "q" (index) or "s" (scan), then
// base64url of the triage sort key or the primary key.
func cursor(kind byte, v string) string {
	return string(kind) + base64.RawURLEncoding.EncodeToString([]byte(v))
}

func parseCursor(c string, kind byte) (string, error) {
	if c == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c[1:])
	if c[0] != kind || err != nil || len(raw) == 0 {
		return "", fmt.Errorf("%w %q: pass the Next of the same listing (same filters, same --scan)", ErrBadCursor, c)
	}
	return string(raw), nil
}

// List returns one page of the records or poison notes q selects: from the
// triage index when q.Indexed() and the table has it (newest first), else
// from a Scan with a filter (in table order). The page's Cost says which,
// and what it read.
func (a *Admin) List(ctx context.Context, q Query) (Page, error) {
	switch {
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	case q.Limit < 0 || q.Limit > maxListLimit:
		return Page{}, fmt.Errorf("limit %d: want 1 to %d", q.Limit, maxListLimit)
	}
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	if q.Indexed() && a.indexed {
		return a.query(ctx, q)
	}
	return a.scan(ctx, q)
}

// filter builds the conditions every listed item must meet, over the
// names and values given.
func (a *Admin) filter(q Query, attrNames map[string]string, values map[string]types.AttributeValue) string {
	conds := []string{"#expires_at > :now_s"}
	attrNames["#expires_at"] = AttrExpiresAt
	values[":now_s"] = n(q.Now.Unix())
	attrNames["#status"] = AttrStatus
	switch {
	case q.Poison:
		conds = append(conds, "#status = :poison")
		values[":poison"] = str(StatusPoison)
	case q.Status != "":
		conds = append(conds, "#status = :status")
		values[":status"] = str(string(q.Status))
	case q.WithPoison:
		conds = append(conds, "#status IN (:in_progress, :succeeded, :failed, :poison)")
		values[":poison"] = str(StatusPoison)
	default:
		conds = append(conds, "#status IN (:in_progress, :succeeded, :failed)")
	}
	if !q.Poison && q.Status == "" {
		values[":in_progress"] = str(string(idem.StatusInProgress))
		values[":succeeded"] = str(string(idem.StatusSucceeded))
		values[":failed"] = str(string(idem.StatusFailed))
	}
	if q.Code != "" {
		attr := AttrErrorCode
		if q.Poison {
			attr = AttrReason
		}
		conds = append(conds, "#code = :code")
		attrNames["#code"] = attr
		values[":code"] = str(string(q.Code))
	}
	return strings.Join(conds, " AND ")
}

// decodeInto adds item to the page, unless q.Keep refuses it, and reports
// whether it did.
func (a *Admin) decodeInto(p *Page, q Query, item map[string]types.AttributeValue) (bool, error) {
	if s, _ := item[AttrStatus].(*types.AttributeValueMemberS); q.Poison || q.WithPoison && s != nil && s.Value == StatusPoison {
		note, err := decodePoison(item, a.namespace)
		p.Poison = append(p.Poison, note)
		return true, err
	}
	rec, err := decode(item, a.namespace)
	if err != nil || q.Keep != nil && !q.Keep(rec) {
		return false, err
	}
	p.Records = append(p.Records, rec)
	return true, nil
}

// scan reads the table with a filter, page after page, until the page is
// full or the table ends.
func (a *Admin) scan(ctx context.Context, q Query) (Page, error) {
	start, err := parseCursor(q.Cursor, 's')
	if err != nil {
		return Page{}, err
	}
	attrNames := map[string]string{"#pk": AttrPK}
	prefix := a.namespace + "#"
	if q.Poison {
		prefix = a.poisonPK("")
	}
	values := map[string]types.AttributeValue{":prefix": str(prefix)}
	filter := "begins_with(#pk, :prefix) AND " + a.filter(q, attrNames, values)
	if !q.Since.IsZero() || !q.Until.IsZero() {
		filter += " AND #updated_at BETWEEN :since AND :until"
		attrNames["#updated_at"] = AttrUpdatedAt
		values[":since"], values[":until"] = ms(q.Since), until(q.Until)
	}
	in := &dynamodb.ScanInput{
		TableName:                 &a.table,
		FilterExpression:          &filter,
		ExpressionAttributeNames:  attrNames,
		ExpressionAttributeValues: values,
		ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
	}
	if start != "" {
		in.ExclusiveStartKey = map[string]types.AttributeValue{AttrPK: str(start)}
	}
	p := Page{Cost: Cost{Method: "scan"}}
	for {
		out, err := a.admin.Scan(ctx, in)
		if err != nil {
			return Page{}, a.classify("Scan", err)
		}
		p.Cost.count(out.ScannedCount, out.ConsumedCapacity)
		for i, item := range out.Items {
			kept, err := a.decodeInto(&p, q, item)
			if err != nil {
				return Page{}, err
			}
			if !kept {
				continue
			}
			if p.Cost.ItemsReturned++; p.Cost.ItemsReturned == q.Limit {
				// Full: continue after this item, unless it ended the table.
				if i < len(out.Items)-1 || len(out.LastEvaluatedKey) > 0 {
					p.Next = cursor('s', item[AttrPK].(*types.AttributeValueMemberS).Value)
				}
				return p, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return p, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func until(t time.Time) types.AttributeValue {
	if t.IsZero() {
		return n(1<<53 - 1)
	}
	return ms(t)
}

// query reads every triage shard newest first and merges them: each shard
// is sorted by its sort key, which starts with the time of the write and
// ends with the unique key, so the merge is a total order and the cursor is
// the last sort key returned.
func (a *Admin) query(ctx context.Context, q Query) (Page, error) {
	after, err := parseCursor(q.Cursor, 'q')
	if err != nil {
		return Page{}, err
	}
	p := Page{Cost: Cost{Method: "query"}}
	shards := a.shardReaders(q, after, &p.Cost)
	var last string
	for p.Cost.ItemsReturned < q.Limit {
		best, err := newest(ctx, shards)
		if err != nil {
			return Page{}, err
		}
		if best == nil {
			return p, nil // every shard is exhausted
		}
		item := best.pop()
		kept, err := a.decodeInto(&p, q, item)
		if err != nil {
			return Page{}, err
		}
		if kept {
			last = item[AttrTriageSK].(*types.AttributeValueMemberS).Value
			p.Cost.ItemsReturned++
		}
	}
	more, err := anyLeft(ctx, shards)
	if err != nil {
		return Page{}, err
	}
	if more {
		p.Next = cursor('q', last)
	}
	return p, nil
}

// shardReaders are the queries of q's triage shards, newest first, from
// the cursor's sort key after (if any) down, counting into cost.
func (a *Admin) shardReaders(q Query, after string, cost *Cost) []*shardReader {
	kind := triageFailed
	if q.Poison {
		kind = triagePoison
	}
	lo, hi := "0", "9999999999999$" // '$' sorts after the '#' that follows the time
	if !q.Since.IsZero() {
		lo = fmt.Sprintf("%013d", q.Since.UnixMilli())
	}
	if !q.Until.IsZero() {
		hi = fmt.Sprintf("%013d$", q.Until.UnixMilli())
	}
	if after != "" && after < hi {
		hi = after // inclusive in BETWEEN; the item itself is skipped by the reader
	}
	shards := make([]*shardReader, TriageShards)
	for i := range shards {
		attrNames := map[string]string{"#triage": AttrTriage, "#triage_sk": AttrTriageSK}
		values := map[string]types.AttributeValue{
			":triage": str(a.triagePK(kind, i)), ":lo": str(lo), ":hi": str(hi),
		}
		filter := a.filter(q, attrNames, values)
		shards[i] = &shardReader{a: a, cost: cost, skip: after, in: &dynamodb.QueryInput{
			TableName:                 &a.table,
			IndexName:                 aws.String(IndexTriage),
			KeyConditionExpression:    aws.String("#triage = :triage AND #triage_sk BETWEEN :lo AND :hi"),
			FilterExpression:          &filter,
			ExpressionAttributeNames:  attrNames,
			ExpressionAttributeValues: values,
			ScanIndexForward:          aws.Bool(false),
			Limit:                     aws.Int32(int32(q.Limit) + 1),
			ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
		}}
	}
	return shards
}

// newest returns the shard whose head item is the newest, or nil when
// every shard is exhausted.
func newest(ctx context.Context, shards []*shardReader) (*shardReader, error) {
	var best *shardReader
	for _, s := range shards {
		ok, err := s.fill(ctx)
		if err != nil {
			return nil, err
		}
		if ok && (best == nil || s.head() > best.head()) {
			best = s
		}
	}
	return best, nil
}

// anyLeft reports whether any shard has an item left, reading no further
// than the first shard that has one.
func anyLeft(ctx context.Context, shards []*shardReader) (bool, error) {
	for _, s := range shards {
		if ok, err := s.fill(ctx); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// shardReader reads one triage shard page by page, newest first.
type shardReader struct {
	a     *Admin
	in    *dynamodb.QueryInput
	cost  *Cost
	skip  string // the cursor's own item, included by BETWEEN
	items []map[string]types.AttributeValue
	ended bool
}

// fill makes sure an item is at the head, reading pages as needed, and
// reports whether there is one.
func (s *shardReader) fill(ctx context.Context) (bool, error) {
	for {
		for len(s.items) > 0 && s.head() == s.skip {
			s.items = s.items[1:]
		}
		if len(s.items) > 0 {
			return true, nil
		}
		if s.ended {
			return false, nil
		}
		out, err := s.a.admin.Query(ctx, s.in)
		if err != nil {
			return false, s.a.classify("Query", err)
		}
		s.cost.count(out.ScannedCount, out.ConsumedCapacity)
		s.items = out.Items
		if len(out.LastEvaluatedKey) == 0 {
			s.ended = true
		}
		s.in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

func (s *shardReader) head() string {
	v, _ := s.items[0][AttrTriageSK].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

func (s *shardReader) pop() map[string]types.AttributeValue {
	item := s.items[0]
	s.items = s.items[1:]
	return item
}

// HasIndexEntries reports whether the triage index holds anything of the
// namespace: a failure or a poison note, expired or not. It reads at most
// one item of each shard of each kind (2 × TriageShards queries with a
// Limit of 1), never the table: enough to tell a namespace the function
// writes to from a mistyped one. On a table without the index it reports
// false and reads nothing.
func (a *Admin) HasIndexEntries(ctx context.Context) (bool, Cost, error) {
	c := Cost{Method: "query"}
	if !a.indexed {
		return false, c, nil
	}
	for _, kind := range []triageKind{triageFailed, triagePoison} {
		for shard := range TriageShards {
			out, err := a.admin.Query(ctx, &dynamodb.QueryInput{
				TableName:                 &a.table,
				IndexName:                 aws.String(IndexTriage),
				KeyConditionExpression:    aws.String("#triage = :triage"),
				ExpressionAttributeNames:  triageNames,
				ExpressionAttributeValues: map[string]types.AttributeValue{":triage": str(a.triagePK(kind, shard))},
				Limit:                     aws.Int32(1),
				ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
			})
			if err != nil {
				return false, c, a.classify("Query", err)
			}
			c.count(out.ScannedCount, out.ConsumedCapacity)
			if len(out.Items) > 0 {
				c.ItemsReturned++
				return true, c, nil
			}
		}
	}
	return false, c, nil
}

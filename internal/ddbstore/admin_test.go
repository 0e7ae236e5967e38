package ddbstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
)

var servers = []struct {
	name string
	env  func(*testing.T) *env
}{
	{"minidyn", minidynEnv},
	{"moto", motoEnv},
}

// seed writes one record through the store, as the engine would: reserved
// at at, then completed, failed, or left in progress (lease ended).
func seed(t *testing.T, s idem.Store, key string, status idem.Status, code idem.Code, at time.Time) idem.Record {
	t.Helper()
	ctx := context.Background()
	r := idem.Reservation{Key: key, Fingerprint: strings.Repeat("f", 64), Token: "tok-" + key, Now: at,
		LeaseUntil: at.Add(time.Second), ExpiresAt: at.Add(48 * time.Hour)}
	if _, ok, err := s.Reserve(ctx, r); err != nil || !ok {
		t.Fatalf("Reserve(%s) = %v, %v", key, ok, err)
	}
	f := idem.Finish{Key: key, Token: r.Token, Now: at, Attempts: 1, ExpiresAt: r.ExpiresAt}
	switch status {
	case idem.StatusSucceeded:
		f.Result = []byte(`{"status":202}`)
		if err := s.Complete(ctx, f); err != nil {
			t.Fatal(err)
		}
	case idem.StatusFailed:
		f.ErrorCode, f.ErrorMessage, f.Retryable = code, "failed: "+string(code), code == idem.CodeTransientFailure
		if err := s.Fail(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	rec, _, err := s.Get(ctx, key, at)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func rawItem(t *testing.T, e *env, pk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// TestTriageIndexKeyFollowsTheFunctionsWrites pins which writes put a record
// in the sparse triage index: Fail, RecordPoison and Release set its key;
// Reserve and Complete never do; a take-over's whole-item put removes it.
func TestTriageIndexKeyFollowsTheFunctionsWrites(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			e := srv.env(t)
			admin := e.admin(t)
			ctx := context.Background()
			at := time.UnixMilli(time.Now().UnixMilli())
			key := "evt:triage-1:notify"
			pk := "test-fn#" + key
			check := func(step, wantTriage, wantSK string) {
				t.Helper()
				item := rawItem(t, e, pk)
				if got := attrS(item, "triage"); got != wantTriage {
					t.Errorf("after %s: triage got %q, want %q", step, got, wantTriage)
				}
				if got := attrS(item, "triage_sk"); got != wantSK {
					t.Errorf("after %s: triage_sk got %q, want %q", step, got, wantSK)
				}
			}
			rec := seed(t, admin, key, idem.StatusInProgress, "", at)
			check("Reserve", "", "")
			if err := admin.Fail(ctx, idem.Finish{Key: key, Token: rec.Token, Now: at, Attempts: 1, ExpiresAt: rec.ExpiresAt, ErrorCode: "HTTP_422"}); err != nil {
				t.Fatal(err)
			}
			shard := "test-fn#FAILED#" + strconv.Itoa(shardOf(key))
			sk := fmt.Sprintf("%013d#%s", at.UnixMilli(), key)
			check("Fail", shard, sk)
			failed, _, _ := admin.Get(ctx, key, at)
			later := at.Add(time.Second)
			released, ok, err := admin.Release(ctx, failed, idem.Release{Token: "tok-released", Now: later, Audit: "a"})
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			check("Release", shard, fmt.Sprintf("%013d#%s", later.UnixMilli(), key))
			next := idem.Reservation{Key: key, Fingerprint: rec.Fingerprint, Token: "tok-next", Now: later, LeaseUntil: later.Add(time.Minute), ExpiresAt: later.Add(time.Hour)}
			if _, ok, err := admin.TakeOver(ctx, released, next); err != nil || !ok {
				t.Fatal(ok, err)
			}
			check("TakeOver", "", "")
			if err := admin.Complete(ctx, idem.Finish{Key: key, Token: "tok-next", Now: later, Attempts: 1, ExpiresAt: next.ExpiresAt, Result: []byte(`1`)}); err != nil {
				t.Fatal(err)
			}
			check("Complete", "", "")
			if err := admin.RecordPoison(ctx, idem.Poison{ID: "m-1", Reason: idem.CodeNotJSON, At: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			item := rawItem(t, e, "test-fn#poison#m-1")
			if got, want := attrS(item, "triage"), "test-fn#POISON#"+strconv.Itoa(shardOf("m-1")); got != want {
				t.Errorf("after RecordPoison: triage got %q, want %q", got, want)
			}
		})
	}
}

// shardOf mirrors the driver's FNV-1a spread, to pin the encoding.
func shardOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % ddbstore.TriageShards)
}

// listAll pages through a query and returns every record's key in order,
// and the summed cost.
func listAll(t *testing.T, a *ddbstore.Admin, q ddbstore.Query) ([]string, ddbstore.Cost) {
	t.Helper()
	var keys []string
	var cost ddbstore.Cost
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatal("more than 100 pages: the cursor does not advance")
		}
		p, err := a.List(context.Background(), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		cost.Add(p.Cost)
		for _, r := range p.Records {
			keys = append(keys, r.Key)
		}
		for _, n := range p.Poison {
			keys = append(keys, n.ID)
		}
		if len(p.Records)+len(p.Poison) > q.Limit && q.Limit > 0 {
			t.Fatalf("page of %d items, want at most the limit %d", len(p.Records)+len(p.Poison), q.Limit)
		}
		if p.Next == "" {
			return keys, cost
		}
		q.Cursor = p.Next
	}
}

func TestList(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			e := srv.env(t)
			admin := e.admin(t)
			if info, err := admin.Check(context.Background()); err != nil || !info.Indexed {
				t.Fatalf("Check = %+v, %v; want an indexed table", info, err)
			}
			base := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli())
			var failed422, failedAll []string // newest first
			for i := range 9 {
				code := idem.Code("HTTP_422")
				if i%3 == 2 {
					code = idem.CodeTransientFailure
				}
				key := fmt.Sprintf("evt:order-%d:refund", i)
				seed(t, admin, key, idem.StatusFailed, code, base.Add(time.Duration(i)*time.Minute))
				failedAll = append([]string{key}, failedAll...)
				if code == "HTTP_422" {
					failed422 = append([]string{key}, failed422...)
				}
			}
			// Two writes in the same millisecond still page in a total order.
			seed(t, admin, "evt:same-ms-a:refund", idem.StatusFailed, "HTTP_500", base.Add(20*time.Minute))
			seed(t, admin, "evt:same-ms-b:refund", idem.StatusFailed, "HTTP_500", base.Add(20*time.Minute))
			failedAll = append([]string{"evt:same-ms-b:refund", "evt:same-ms-a:refund"}, failedAll...)
			for i := range 4 {
				seed(t, admin, fmt.Sprintf("evt:ok-%d:notify", i), idem.StatusSucceeded, "", base.Add(time.Duration(i)*time.Minute))
			}
			seed(t, admin, "evt:stuck-1:notify", idem.StatusInProgress, "", base)
			// Expired, and another function's records: never listed.
			old := time.UnixMilli(time.Now().Add(-72 * time.Hour).UnixMilli())
			seed(t, admin, "evt:expired-1:refund", idem.StatusFailed, "HTTP_422", old)
			other, err := ddbstore.NewAdmin(e.client, e.table, "other-fn")
			if err != nil {
				t.Fatal(err)
			}
			seed(t, other, "evt:theirs-1:refund", idem.StatusFailed, "HTTP_422", base)
			for i, reason := range []idem.Code{idem.CodeNotJSON, idem.CodeKeyReused, idem.CodeNotJSON} {
				if err := admin.RecordPoison(context.Background(), idem.Poison{ID: fmt.Sprintf("msg-%d", i), Reason: reason, At: base.Add(time.Duration(i) * time.Minute), ExpiresAt: base.Add(48 * time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Now()
			tests := []struct {
				name    string
				q       ddbstore.Query
				want    []string
				ordered bool
				method  string
			}{
				{"failed, one page", ddbstore.Query{Status: idem.StatusFailed}, failedAll, true, "query"},
				{"failed, pages of 2", ddbstore.Query{Status: idem.StatusFailed, Limit: 2}, failedAll, true, "query"},
				{"failed, pages of 1", ddbstore.Query{Status: idem.StatusFailed, Limit: 1}, failedAll, true, "query"},
				{"by code", ddbstore.Query{Status: idem.StatusFailed, Code: "HTTP_422", Limit: 4}, failed422, true, "query"},
				{"time window", ddbstore.Query{Status: idem.StatusFailed, Since: base.Add(3 * time.Minute), Until: base.Add(5 * time.Minute)},
					[]string{"evt:order-5:refund", "evt:order-4:refund", "evt:order-3:refund"}, true, "query"},
				{"poison by reason", ddbstore.Query{Poison: true, Code: idem.CodeNotJSON}, []string{"msg-2", "msg-0"}, true, "query"},
				{"failed by scan", ddbstore.Query{Status: idem.StatusFailed, Scan: true, Limit: 3}, failedAll, false, "scan"},
				{"by code by scan", ddbstore.Query{Status: idem.StatusFailed, Code: "HTTP_422", Scan: true}, failed422, false, "scan"},
				{"in progress (scan)", ddbstore.Query{Status: idem.StatusInProgress}, []string{"evt:stuck-1:notify"}, false, "scan"},
				{"succeeded (scan)", ddbstore.Query{Status: idem.StatusSucceeded, Limit: 3},
					[]string{"evt:ok-0:notify", "evt:ok-1:notify", "evt:ok-2:notify", "evt:ok-3:notify"}, false, "scan"},
				{"poison by scan", ddbstore.Query{Poison: true, Scan: true}, []string{"msg-0", "msg-1", "msg-2"}, false, "scan"},
				{"every status (scan)", ddbstore.Query{Since: base.Add(8 * time.Minute)}, []string{"evt:order-8:refund", "evt:same-ms-a:refund", "evt:same-ms-b:refund"}, false, "scan"},
				// Keep selects in the caller's terms; pages still fill to the
				// limit, and the cursor resumes after the last record kept.
				{"kept, pages of 2", ddbstore.Query{Status: idem.StatusFailed, Limit: 2, Keep: notTransient}, notTransientOf(failedAll), true, "query"},
				{"kept by scan, pages of 1", ddbstore.Query{Status: idem.StatusFailed, Scan: true, Limit: 1, Keep: notTransient}, notTransientOf(failedAll), false, "scan"},
				{"none kept", ddbstore.Query{Status: idem.StatusInProgress, Keep: func(idem.Record) bool { return false }}, nil, false, "scan"},
				// Records and poison notes from one read of the table.
				{"with poison (one scan)", ddbstore.Query{WithPoison: true, Limit: 4},
					slices.Concat(failedAll, []string{"evt:ok-0:notify", "evt:ok-1:notify", "evt:ok-2:notify", "evt:ok-3:notify", "evt:stuck-1:notify", "msg-0", "msg-1", "msg-2"}), false, "scan"},
			}
			for _, tt := range tests {
				t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
					if srv.name == "minidyn" && tt.method == "query" && !tt.q.Poison {
						// minidyn's index maintenance on UpdateItem (core/index.go,
						// updateData) replaces another item's index entry when an
						// update adds the index key, so records that Fail put in the
						// index are lost; moto and DynamoDB keep them.
						t.Skip("minidyn loses index keys that UpdateItem adds; checked on moto")
					}
					tt.q.Now = now
					got, cost := listAll(t, admin, tt.q)
					if !tt.ordered {
						slices.Sort(got)
						tt.want = slices.Sorted(slices.Values(tt.want))
					}
					if diff := cmp.Diff(tt.want, got); diff != "" {
						t.Errorf("listed keys (-want +got):\n%s", diff)
					}
					if cost.Method != tt.method || cost.ItemsReturned != len(tt.want) {
						t.Errorf("cost %+v, want method %s and %d items returned", cost, tt.method, len(tt.want))
					}
				})
			}
			t.Run("bad_cursor", func(t *testing.T) {
				for _, c := range []string{"zzz", "s" + "c29tZQ", "q!!"} {
					if _, err := admin.List(context.Background(), ddbstore.Query{Status: idem.StatusFailed, Cursor: c, Now: now}); !errors.Is(err, ddbstore.ErrBadCursor) {
						t.Errorf("List with cursor %q = %v, want ErrBadCursor", c, err)
					}
				}
			})
		})
	}
}

// notTransient keeps the failures that are not TRANSIENT_FAILURE.
func notTransient(rec idem.Record) bool { return rec.ErrorCode != idem.CodeTransientFailure }

// notTransientOf are the keys of TestList's failures notTransient keeps
// (every third order is transient).
func notTransientOf(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains([]string{"evt:order-2:refund", "evt:order-5:refund", "evt:order-8:refund"}, k) {
			out = append(out, k)
		}
	}
	return out
}

// TestHasIndexEntries tells a namespace with failures or poison notes from
// one with none (a mistyped one), reading one item per shard at most.
func TestHasIndexEntries(t *testing.T) {
	e := motoEnv(t)
	ctx := context.Background()
	newAdmin := func(ns string) *ddbstore.Admin {
		a, err := ddbstore.NewAdmin(e.client, e.table, ns)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Check(ctx); err != nil {
			t.Fatal(err)
		}
		return a
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	failures, notes, nothing := newAdmin("fn-failures"), newAdmin("fn-notes"), newAdmin("fn-nothing")
	seed(t, failures, "evt:hie-1:refund", idem.StatusFailed, "HTTP_422", at)
	if err := notes.RecordPoison(ctx, idem.Poison{ID: "m-hie", Reason: idem.CodeNotJSON, At: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	seed(t, nothing, "evt:hie-2:notify", idem.StatusSucceeded, "", at) // successes are not indexed
	for _, tt := range []struct {
		name  string
		admin *ddbstore.Admin
		want  bool
	}{{"failures", failures, true}, {"poison notes", notes, true}, {"successes only", nothing, false}, {"unknown", newAdmin("fn-typo"), false}} {
		e.counter.Reset()
		got, cost, err := tt.admin.HasIndexEntries(ctx)
		if err != nil || got != tt.want {
			t.Errorf("%s: HasIndexEntries = %v, %v; want %v", tt.name, got, err, tt.want)
		}
		if calls := e.counter.Counts()["Query"]; calls != cost.Calls || calls > 2*ddbstore.TriageShards || e.counter.Total() != calls || cost.ItemsRead > 1 {
			t.Errorf("%s: %d queries of %d calls (cost %+v); want at most %d queries reading at most 1 item, nothing else", tt.name, calls, e.counter.Total(), cost, 2*ddbstore.TriageShards)
		}
	}
}

func TestCheckTable(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	e := newEnv(t, ep, nil)
	ctx := context.Background()
	// Another schema: a numeric hash key named id.
	other := "not-oncely"
	if _, err := e.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &other, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeN}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	// An oncely table from before the index.
	old := "oncely-before-index"
	if _, err := e.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &old, BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		table   string
		indexed bool
		errText string // "" for no error
	}{
		{e.table, true, ""},
		{old, false, ""},
		{other, false, `dynamodb table "not-oncely" is not an oncely records table: its key is id HASH`},
		{"no-such-table", false, `dynamodb DescribeTable on table "no-such-table": ResourceNotFoundException: the table does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			a, err := ddbstore.NewAdmin(e.client, tt.table, "fn")
			if err != nil {
				t.Fatal(err)
			}
			info, err := a.Check(ctx)
			if tt.errText == "" && err != nil || tt.errText != "" && (err == nil || !strings.Contains(err.Error(), tt.errText)) {
				t.Fatalf("Check = %v, want error containing %q", err, tt.errText)
			}
			if err != nil && idem.Classify(err) != idem.ClassPermanent {
				t.Errorf("Check error class %v, want permanent", idem.Classify(err))
			}
			if info.Indexed != tt.indexed {
				t.Errorf("Indexed got %v, want %v", info.Indexed, tt.indexed)
			}
			if tt.table == old {
				seed(t, a, "evt:before-1:notify", idem.StatusFailed, "HTTP_422", time.Now())
				p, err := a.List(ctx, ddbstore.Query{Status: idem.StatusFailed, Now: time.Now()})
				if err != nil || p.Cost.Method != "scan" || len(p.Records) != 1 {
					t.Errorf("List on a table without the index = %d records by %q, %v; want 1 by scan", len(p.Records), p.Cost.Method, err)
				}
			}
		})
	}
}

func TestForgetLeavesANote(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			e := srv.env(t)
			a := e.admin(t)
			ctx := context.Background()
			now := time.UnixMilli(time.Now().UnixMilli())
			rec := seed(t, a, "evt:forget-1:notify", idem.StatusFailed, "HTTP_422", now)
			if _, ok, err := a.Forget(ctx, rec, idem.Forget{Token: "forget-tok-1", Now: now, Audit: "who and why"}); err != nil || !ok {
				t.Fatalf("Forget = %v, %v", ok, err)
			}
			note, found, err := a.GetForgotten(ctx, rec.Key, now)
			if err != nil || !found {
				t.Fatalf("GetForgotten = %v, %v; want the note", found, err)
			}
			want := ddbstore.ForgetNote{Key: rec.Key, Status: idem.StatusFailed, ErrorCode: "HTTP_422", Fingerprint: rec.Fingerprint,
				Attempts: 1, At: now, ExpiresAt: rec.ExpiresAt, Audit: "who and why", Token: "forget-tok-1"}
			if diff := cmp.Diff(want, note); diff != "" {
				t.Errorf("forget note (-want +got):\n%s", diff)
			}
			if _, found, _ := a.GetForgotten(ctx, rec.Key, rec.ExpiresAt); found {
				t.Errorf("forget note found at its expiry, want gone with the record's retention")
			}
			// The note is not a record: listings and Get never show it.
			if _, found, _ := a.Get(ctx, rec.Key, now); found {
				t.Errorf("Get after Forget found a record")
			}
			p, err := a.List(ctx, ddbstore.Query{Now: now})
			if err != nil || len(p.Records) != 0 {
				t.Errorf("listing after Forget = %d records, %v; want none", len(p.Records), err)
			}
		})
	}
}

func TestInspectShowsExpiredRecords(t *testing.T) {
	e := minidynEnv(t)
	a := e.admin(t)
	old := time.Now().Add(-72 * time.Hour)
	seed(t, a, "evt:old-1:notify", idem.StatusSucceeded, "", old)
	if _, found, _ := a.Get(context.Background(), "evt:old-1:notify", time.Now()); found {
		t.Fatalf("Get found an expired record")
	}
	rec, found, err := a.Inspect(context.Background(), "evt:old-1:notify")
	if err != nil || !found || !rec.Expired(time.Now()) || rec.Status != idem.StatusSucceeded {
		t.Errorf("Inspect = %+v, %v, %v; want the expired SUCCEEDED record", rec, found, err)
	}
}

func TestOperatorErrorsNameTheOperatorsCredentials(t *testing.T) {
	e, _ := faultEnv(t, func(op string, n int64) string {
		return "400 AccessDeniedException"
	})
	a := e.admin(t)
	_, err := a.List(context.Background(), ddbstore.Query{Status: idem.StatusFailed, Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "your credentials need dynamodb:Query") {
		t.Errorf("List under AccessDenied = %v, want a message that your credentials need dynamodb:Query", err)
	}
	if _, _, err := a.Get(context.Background(), "evt:denied-1:x", time.Now()); err == nil || !strings.Contains(err.Error(), "your credentials need dynamodb:GetItem") {
		t.Errorf("Get under AccessDenied = %v, want a message that your credentials need dynamodb:GetItem", err)
	}
}

// TestListCostIndexVersusScan measures what listing the failed records
// costs both ways on moto, with records written by the store: the index
// reads only the failed ones, a scan reads the whole table. Set
// ONCELY_MEASURE_RECORDS to measure a larger table (docs/operating.md's numbers).
func TestListCostIndexVersusScan(t *testing.T) {
	e := motoEnv(t)
	a := e.admin(t)
	total, failedEvery := 150, 25
	if v := os.Getenv("ONCELY_MEASURE_RECORDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < failedEvery {
			t.Fatalf("ONCELY_MEASURE_RECORDS=%q: want a number >= %d", v, failedEvery)
		}
		total = n
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	var wg sync.WaitGroup
	keys := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range keys {
				status := idem.StatusSucceeded
				if i%failedEvery == 0 {
					status = idem.StatusFailed
				}
				seed(t, a, fmt.Sprintf("evt:measure-%06d:notify", i), status, "HTTP_422", now.Add(-time.Duration(i)*time.Millisecond))
			}
		})
	}
	for i := range total {
		keys <- i
	}
	close(keys)
	wg.Wait()
	failed := (total + failedEvery - 1) / failedEvery
	tableBytes, failedBytes := tableSizes(t, e)
	q := ddbstore.Query{Status: idem.StatusFailed, Limit: 1000, Now: time.Now()}
	index, indexCost := listAll(t, a, q)
	q.Scan = true
	scan, scanCost := listAll(t, a, q)
	if len(index) != failed || len(scan) != failed {
		t.Fatalf("listed %d by index and %d by scan, want %d both ways", len(index), len(scan), failed)
	}
	if indexCost.ItemsRead != failed {
		t.Errorf("the index read %d items, want only the %d failed ones", indexCost.ItemsRead, failed)
	}
	if scanCost.ItemsRead != total {
		t.Errorf("the scan read %d items, want the whole table, %d", scanCost.ItemsRead, total)
	}
	// DynamoDB bills a Query or Scan page by the bytes it reads, rounded up
	// to 4 KB, at half a unit for eventually consistent reads.
	estimate := func(bytes, calls int) float64 {
		return math.Max(math.Ceil(float64(bytes)/4096)*0.5, 0.5*float64(calls))
	}
	t.Logf("listing %d failed records in a table of %d records (%d bytes; failed %d bytes):", failed, total, tableBytes, failedBytes)
	t.Logf("  index: %d calls, %d items read, %d returned, %.1f capacity units reported by moto, about %.1f read units by DynamoDB's rule",
		indexCost.Calls, indexCost.ItemsRead, indexCost.ItemsReturned, indexCost.CapacityUnits, estimate(failedBytes, indexCost.Calls))
	t.Logf("  scan:  %d calls, %d items read, %d returned, %.1f capacity units reported by moto, about %.1f read units by DynamoDB's rule",
		scanCost.Calls, scanCost.ItemsRead, scanCost.ItemsReturned, scanCost.CapacityUnits, estimate(tableBytes, scanCost.Calls))
}

// tableSizes sums item sizes as DynamoDB counts them (names plus values)
// for the whole table and for its FAILED records.
func tableSizes(t *testing.T, e *env) (all, failed int) {
	t.Helper()
	p := dynamodb.NewScanPaginator(e.client, &dynamodb.ScanInput{TableName: &e.table})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range out.Items {
			size := 0
			for name, v := range item {
				size += len(name)
				switch v := v.(type) {
				case *types.AttributeValueMemberS:
					size += len(v.Value)
				case *types.AttributeValueMemberN:
					size += (len(v.Value)+1)/2 + 1
				case *types.AttributeValueMemberB:
					size += len(v.Value)
				default:
					size++
				}
			}
			all += size
			if attrS(item, "status") == "FAILED" {
				failed += size
			}
		}
	}
	return all, failed
}

// TestOperatorWritesSurviveALostReply drops the reply of the release's
// PutItem and of the forget's TransactWriteItems after the server acted;
// the SDK sends each again, its condition fails against the write it made,
// and the store must still report the operator's change as made.
func TestOperatorWritesSurviveALostReply(t *testing.T) {
	for _, srv := range []struct {
		name     string
		endpoint func(*testing.T) string
	}{
		{"minidyn", func(t *testing.T) string { _, ep := ddblocal.Minidyn(t); return ep }},
		{"moto", func(t *testing.T) string { return ddblocal.MotoEndpoint(t) }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			endpoint := srv.endpoint(t)
			var drop atomic.Value // the operation whose next reply is dropped
			drop.Store("")
			sent := map[string]int{}
			var mu sync.Mutex
			ft := &faults.Transport{Replies: ddblocal.Replies, Decide: func(req *http.Request) faults.Kind {
				op := ddblocal.Operation(req)
				mu.Lock()
				sent[op]++
				mu.Unlock()
				if drop.CompareAndSwap(op, "") {
					return faults.DropReply
				}
				return faults.None
			}}
			cfg := ddblocal.Config(endpoint, ft)
			cfg.Retryer = quickRetryer
			e := newEnvConfig(t, cfg)
			a := e.admin(t)
			ctx := context.Background()
			now := time.UnixMilli(time.Now().UnixMilli())

			prev := seed(t, a, "evt:lost-reply-1:notify", idem.StatusFailed, "HTTP_422", now)
			rel := idem.Release{Token: "release-tok-1", Now: now, Audit: "who and why"}
			drop.Store("PutItem")
			rec, ok, err := a.Release(ctx, prev, rel)
			if err != nil || !ok {
				t.Fatalf("Release with its reply lost = ok %v, err %v; want released", ok, err)
			}
			if diff := cmp.Diff(idem.Released(prev, rel), rec); diff != "" {
				t.Errorf("Release returned (-want +got):\n%s", diff)
			}

			prev = seed(t, a, "evt:lost-reply-2:notify", idem.StatusFailed, "HTTP_422", now)
			drop.Store("TransactWriteItems")
			if _, ok, err := a.Forget(ctx, prev, idem.Forget{Token: "forget-tok-1", Now: now, Audit: "who and why"}); err != nil || !ok {
				t.Fatalf("Forget with its reply lost = ok %v, err %v; want forgotten", ok, err)
			}
			if _, found, _ := a.Get(ctx, prev.Key, now); found {
				t.Errorf("the record is still there after Forget")
			}
			mu.Lock()
			defer mu.Unlock()
			if sent["PutItem"] < 2+2 || sent["TransactWriteItems"] < 2 {
				// 2 PutItems of the two seeds, then the release and its re-send.
				t.Errorf("requests sent %v; want the release's PutItem and the forget's transaction each sent twice", sent)
			}
		})
	}
}

// TestQueryOfAMissingIndexIsNamed pins what each server answers to a query
// of the triage index on a table that predates it, and that Admin turns it
// into a permanent error naming the index and the way out. No server has an
// error code of its own for it: DynamoDB answers ValidationException (see
// TestQueryErrorsAreClassifiedByCode), moto ResourceNotFoundException, each
// with a message naming the index; minidyn v0.8.2 panics in its handler
// (core.(*Table).fetchQueryData reads the missing index), so it answers
// nothing and is skipped.
func TestQueryOfAMissingIndexIsNamed(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			if srv.name == "minidyn" {
				t.Skip("minidyn v0.8.2 panics on a query of a missing index: no answer to classify")
			}
			e := srv.env(t)
			ctx := context.Background()
			old := ddblocal.NewTableKeyedBy(t, e.client, "oncely-no-index-"+strconv.FormatInt(time.Now().UnixNano(), 36), ddbstore.AttrPK)
			a, err := ddbstore.NewAdmin(e.client, old, "fn")
			if err != nil {
				t.Fatal(err)
			}
			// No Check: the Admin assumes the index, as oncelyctl does until told otherwise.
			_, err = a.List(ctx, ddbstore.Query{Status: idem.StatusFailed, Now: time.Now()})
			if err == nil {
				t.Fatal("List of FAILED on a table without the index succeeded; want an error")
			}
			api, ok := errors.AsType[smithy.APIError](err)
			if !ok || api.ErrorCode() != "ResourceNotFoundException" {
				t.Fatalf("moto answered %v; want ResourceNotFoundException", err)
			}
			t.Logf("%s answers: %s: %s", srv.name, api.ErrorCode(), api.ErrorMessage())
			if idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), `has no index "triage"`) || !strings.Contains(err.Error(), "--scan") {
				t.Errorf("List error %v (%v); want a permanent error naming the index and --scan", err, idem.Classify(err))
			}
		})
	}
}

// TestQueryErrorsAreClassifiedByCode pins that a query's error is judged
// by its code: only a ValidationException about the index is the missing
// index. Other refusals whose messages mention an index (throttling of the
// table's global secondary indexes, a denial on the index's ARN) keep
// their own class and hint.
func TestQueryErrorsAreClassifiedByCode(t *testing.T) {
	tests := []struct {
		name, typ, msg string
		class          idem.Class
		want           string // in the error
	}{
		{"missing index", "ValidationException", "The table does not have the specified index: triage",
			idem.ClassPermanent, `has no index "triage"`},
		{"missing table", "ResourceNotFoundException", "Requested resource not found",
			idem.ClassPermanent, "the table does not exist"},
		{"other validation", "ValidationException", "Invalid KeyConditionExpression: Syntax error; token: \\\"BETWEEN\\\"",
			idem.ClassPermanent, "rejected the request as invalid"},
		{"index throttled", "ProvisionedThroughputExceededException",
			"The level of configured provisioned throughput for one or more global secondary indexes of the table was exceeded.",
			idem.ClassTransient, "ProvisionedThroughputExceededException"},
		{"denied on the index", "AccessDeniedException",
			"User: arn:aws:iam::123456789012:user/ops is not authorized to perform: dynamodb:Query on resource: arn:aws:dynamodb:us-east-1:123456789012:table/t/index/triage",
			idem.ClassPermanent, "access denied: your credentials need dynamodb:Query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ep := ddblocal.Minidyn(t)
			rt := &replyTransport{ops: []string{"Query"}, status: 400,
				body: `{"__type":"com.amazonaws.dynamodb.v20120810#` + tt.typ + `","message":"` + tt.msg + `"}`}
			cfg := ddblocal.Config(ep, rt)
			cfg.Retryer = quickRetryer
			a := newEnvConfig(t, cfg).admin(t)
			_, err := a.List(context.Background(), ddbstore.Query{Status: idem.StatusFailed, Now: time.Now()})
			if idem.Classify(err) != tt.class || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v (%v); want class %v and an error containing %q", err, idem.Classify(err), tt.class, tt.want)
			}
			if !strings.HasPrefix(tt.name, "missing index") && strings.Contains(fmt.Sprint(err), "has no index") {
				t.Errorf("got %v; a refusal that is not the missing index was reported as one", err)
			}
		})
	}
}

package dynamostore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/storetest"
)

// contractTable creates a table from the package doc's contract and
// nothing more: hash key KeyAttribute (S), TTL on TTLAttribute (servers
// without the TTL API, minidyn, go without). The tests run on it, so the
// contract is known to be enough.
func contractTable(t *testing.T, client *dynamodb.Client) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "dynamostore-test-" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(dynamostore.KeyAttribute), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(dynamostore.KeyAttribute), KeyType: types.KeyTypeHash}},
	}); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	_, _ = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(dynamostore.TTLAttribute), Enabled: aws.Bool(true)}})
	return name
}

// env is one server, a client whose calls are counted, and a store on a
// fresh contract table.
type env struct {
	client  *dynamodb.Client
	counter *ddblocal.Counter
	table   string
	store   *dynamostore.Store
}

func newEnv(t *testing.T, cfg aws.Config, namespace string) *env {
	t.Helper()
	client, counter := ddblocal.Client(cfg)
	table := contractTable(t, client)
	store, err := dynamostore.New(client, table, dynamostore.Options{Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	return &env{client: client, counter: counter, table: table, store: store}
}

func minidynEnv(t *testing.T) *env {
	t.Helper()
	_, ep := ddblocal.Minidyn(t)
	return newEnv(t, ddblocal.Config(ep, nil), "orders")
}

// quickRetryer is the SDK's standard retryer with short backoffs, to keep
// the fault tests quick.
func quickRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = retry.NewExponentialJitterBackoff(20 * time.Millisecond) })
}

// faulty returns a config whose store calls meet fault k.
func faulty(endpoint string, k faults.Kind) aws.Config {
	ft := &faults.Transport{Replies: ddblocal.Replies, Decide: func(req *http.Request) faults.Kind {
		if slices.Contains(ddblocal.StoreOperations, ddblocal.Operation(req)) {
			return k
		}
		return faults.None
	}}
	cfg := ddblocal.Config(endpoint, ft)
	cfg.Retryer = quickRetryer
	return cfg
}

// harness runs the public suite on one server, through the public API
// only: the store, faults between it and the server, poison notes, and
// effects (puts into a second table).
func harness(endpoint string) storetest.Harness {
	return storetest.Harness{
		NewStore: func(t *testing.T) driver.Store { return newEnv(t, ddblocal.Config(endpoint, nil), "conformance").store },
		NewFaulty: func(t *testing.T, f storetest.Fault) (driver.Store, string) {
			e := newEnv(t, faulty(endpoint, faults.Kind(f)), "conformance")
			return e.store, e.table
		},
		Poison: func(t *testing.T) driver.PoisonStore {
			return newEnv(t, ddblocal.Config(endpoint, nil), "conformance").store
		},
		Effects: func(t *testing.T) storetest.EffectHarness { return effectHarness(t, endpoint) },
	}
}

func effectHarness(t *testing.T, endpoint string) storetest.EffectHarness {
	e := newEnv(t, ddblocal.Config(endpoint, nil), "conformance")
	other := contractTable(t, e.client)
	put := func(name string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           &other,
			Item:                map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: name}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	}
	return storetest.EffectHarness{
		Store: e.store,
		Write: func(t *testing.T, name string) driver.Effects { return dynamostore.Effects{put(name)} },
		Exists: func(t *testing.T, name string) bool {
			out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &other, ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: name}}})
			if err != nil {
				t.Fatal(err)
			}
			return len(out.Item) > 0
		},
		Conflict: func(t *testing.T, name string) driver.Effects {
			taken := put(name + "-taken")
			if _, err := e.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &other, Item: taken.Put.Item}); err != nil {
				t.Fatal(err)
			}
			return dynamostore.Effects{put(name), taken}
		},
		TooMany: func(t *testing.T, prefix string) driver.Effects {
			var eff dynamostore.Effects
			for i := range dynamostore.MaxEffects + 1 {
				eff = append(eff, put(fmt.Sprintf("%s-%d", prefix, i)))
			}
			return eff
		},
		Twice: func(t *testing.T, name string) driver.Effects { return dynamostore.Effects{put(name), put(name)} },
	}
}

// The public conformance suite (store, faults, poison notes, effects), on
// minidyn and on moto, on tables declared from the contract alone.
func TestConformanceMinidyn(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	storetest.Run(t, harness(ep))
}

func TestConformanceMoto(t *testing.T) {
	storetest.Run(t, harness(ddblocal.MotoEndpoint(t)))
}

// New refuses what would store records under the wrong keys or nowhere,
// and says what to do: above all a missing Namespace, which has no
// default.
func TestNewRefusesAMissingNamespace(t *testing.T) {
	client, _ := ddblocal.Client(ddblocal.Config("http://127.0.0.1:1", nil))
	tests := []struct {
		name   string
		client dynamostore.Client
		table  string
		o      dynamostore.Options
		want   string // in the error
	}{
		{"no namespace", client, "idem", dynamostore.Options{}, "Options.Namespace is required"},
		{"a namespace with the separator", client, "idem", dynamostore.Options{Namespace: "a#b"}, `Options.Namespace "a#b" must not contain '#'`},
		{"no table", client, "", dynamostore.Options{Namespace: "orders"}, "a table name is required"},
		{"no client", nil, "idem", dynamostore.Options{Namespace: "orders"}, "a client is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := dynamostore.New(tt.client, tt.table, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) || s != nil {
				t.Errorf("got %v, %v; want no store and an error containing %q", s, err, tt.want)
			}
		})
	}
	if _, err := dynamostore.New(client, "idem", dynamostore.Options{Namespace: "orders"}); err != nil {
		t.Errorf("with a namespace, a table and a client: got %v, want a store", err)
	}
}

// The namespace is part of every stored key: the same key under two
// namespaces on one table is two records, and the item's hash key is
// "<namespace>#<key>", with the expiry in TTLAttribute (epoch seconds), as
// the contract says.
func TestNamespaceIsPartOfTheStoredKey(t *testing.T) {
	e := minidynEnv(t)
	other, err := dynamostore.New(e.client, e.table, dynamostore.Options{Namespace: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	res := func(token string) driver.Reservation {
		return driver.Reservation{Key: "evt:ns-1:charge", Fingerprint: strings.Repeat("a", 64), Token: token, Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	for _, s := range []*dynamostore.Store{e.store, other} {
		if _, ok, err := s.Reserve(ctx, res("t-"+fmt.Sprint(s == other))); err != nil || !ok {
			t.Fatalf("reserve under each namespace: got %v, %v; want both reserved", ok, err)
		}
	}
	out, err := e.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &e.table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{dynamostore.KeyAttribute: &types.AttributeValueMemberS{Value: "orders#evt:ns-1:charge"}}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("the item under orders#evt:ns-1:charge: got %v (%v), want it", out, err)
	}
	exp, ok := out.Item[dynamostore.TTLAttribute].(*types.AttributeValueMemberN)
	if want := fmt.Sprint(now.Add(time.Hour).Unix()); !ok || exp.Value != want {
		t.Errorf("%s got %v, want N %s (epoch seconds)", dynamostore.TTLAttribute, out.Item[dynamostore.TTLAttribute], want)
	}
}

// Check: nil on a table the store can use; a permanent error naming the
// table and what is missing for a missing table, another key schema or a
// denied permission; transient for an outage (which must not fail an init).
func TestCheck(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	plain, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	table := contractTable(t, plain)
	other := ddblocal.NewTableKeyedBy(t, plain, "keyed-by-id", "id")
	tests := []struct {
		name  string
		table string
		fault faults.Kind
		class oncely.Class
		want  string // in the error
	}{
		{name: "the table", table: table},
		{"a missing table", "idem-tabel", faults.None, oncely.ClassPermanent, `table "idem-tabel": ResourceNotFoundException: the table does not exist`},
		{"another key schema", other, faults.None, oncely.ClassPermanent, `table "keyed-by-id": ValidationException`},
		{"a denied permission", table, faults.AccessDenied, oncely.ClassPermanent, "AccessDeniedException: access denied: the function's role needs dynamodb:GetItem"},
		{"throttling", table, faults.Throttle, oncely.ClassTransient, "ThrottlingException"},
		{"a server error", table, faults.ServerError, oncely.ClassTransient, "InternalServerError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := faulty(ep, tt.fault)
			cfg.RetryMaxAttempts = 1
			client, counter := ddblocal.Client(cfg)
			store, err := dynamostore.New(client, tt.table, dynamostore.Options{Namespace: "orders"})
			if err != nil {
				t.Fatal(err)
			}
			err = store.Check(context.Background())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
			} else if oncely.Classify(err) != tt.class || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (%v), want %v containing %q", err, oncely.Classify(err), tt.class, tt.want)
			}
			if diff := cmp.Diff(map[string]int{"GetItem": 1}, counter.Counts()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// RequiredIAMActions is exactly what the store calls on its table: every
// call of every method (Check, a run with each outcome, a take-over,
// poison notes) is one of them, and each of them is called.
func TestRequiredIAMActionsAreTheCallsMade(t *testing.T) {
	e := minidynEnv(t)
	ctx := context.Background()
	now := time.Now()
	res := driver.Reservation{Key: "evt:iam-1:charge", Fingerprint: strings.Repeat("a", 64), Token: "t1", Now: now,
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	steps := []func() error{
		func() error { return e.store.Check(ctx) },
		func() error { _, _, err := e.store.Reserve(ctx, res); return err },
		func() error {
			return e.store.Fail(ctx, driver.Finish{Key: res.Key, Token: "t1", Now: now, Attempts: 1, ExpiresAt: res.ExpiresAt,
				ErrorCode: driver.CodeTransientFailure, ErrorMessage: "down", Retryable: true})
		},
		func() error {
			prev, _, err := e.store.Get(ctx, res.Key, now)
			if err != nil {
				return err
			}
			r := res
			r.Token = "t2"
			_, _, err = e.store.TakeOver(ctx, prev, r)
			return err
		},
		func() error {
			return e.store.Complete(ctx, driver.Finish{Key: res.Key, Token: "t2", Now: now, Attempts: 2, ExpiresAt: res.ExpiresAt, Result: []byte(`"ok"`)})
		},
		func() error {
			return e.store.RecordPoison(ctx, driver.Poison{ID: "m-1", Reason: driver.CodeInvalidPayload, At: now, ExpiresAt: now.Add(time.Hour)})
		},
		func() error { _, _, err := e.store.GetPoison(ctx, "m-1", now); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	var called []string
	for op := range e.counter.Counts() {
		called = append(called, "dynamodb:"+op)
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(dynamostore.RequiredIAMActions())), slices.Sorted(slices.Values(called))); diff != "" {
		t.Errorf("RequiredIAMActions against the calls made (-listed +called):\n%s", diff)
	}
	// A caller that edits the list does not edit the next one.
	got := dynamostore.RequiredIAMActions()
	got[0] = "dynamodb:DeleteTable"
	if slices.Contains(dynamostore.RequiredIAMActions(), "dynamodb:DeleteTable") {
		t.Error("RequiredIAMActions returned a shared slice: a caller's edit changed it")
	}
}

// foreignEffects are effects of another store's kind.
type foreignEffects []string

func (f foreignEffects) Len() int { return len(f) }

// Effects of another kind are refused as INVALID_EFFECTS before anything
// is sent, naming the type the store commits; the record stays in
// progress, its owner's to finish.
func TestEffectsOfAnotherKindAreRefused(t *testing.T) {
	e := minidynEnv(t)
	ctx := context.Background()
	now := time.Now()
	res := driver.Reservation{Key: "evt:fx-1:charge", Fingerprint: strings.Repeat("a", 64), Token: "t1", Now: now,
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if _, ok, err := e.store.Reserve(ctx, res); err != nil || !ok {
		t.Fatal(err)
	}
	e.counter.Reset()
	err := e.store.CompleteWithEffects(ctx, driver.Finish{Key: res.Key, Token: "t1", Now: now, Attempts: 1, ExpiresAt: res.ExpiresAt}, foreignEffects{"x"})
	ce, ok := errors.AsType[*driver.ClassifiedError](err)
	if !ok || ce.Class != driver.ClassPermanent || ce.Code != driver.CodeInvalidEffects || !strings.Contains(err.Error(), "dynamostore.Effects") {
		t.Errorf("got %v; want a permanent INVALID_EFFECTS naming dynamostore.Effects", err)
	}
	if n := e.counter.Total(); n != 0 {
		t.Errorf("got %d calls, want none", n)
	}
	if rec, _, _ := e.store.Get(ctx, res.Key, now); rec.Status != driver.StatusInProgress {
		t.Errorf("record %s after the refusal, want IN_PROGRESS", rec.Status)
	}
}

// Through the engine: oncely.Engine.Run commits a Work's Effects with the
// record, once; the second delivery replays without writing again.
func TestEngineCommitsEffectsOnce(t *testing.T) {
	e := minidynEnv(t)
	entries := contractTable(t, e.client)
	engine, err := oncely.New(e.store, oncely.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := oncely.NewRequest("evt:order-7:ledger", []byte(`{"amount":"12.50"}`))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	work := func(context.Context) ([]byte, oncely.Effects, error) {
		runs++
		return []byte(`{"entry":"order-7"}`), dynamostore.Effects{{Put: &types.Put{TableName: &entries,
			Item:                map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "order-7"}},
			ConditionExpression: aws.String("attribute_not_exists(pk)")}}}, nil
	}
	for i := range 2 {
		out := engine.Run(context.Background(), req, work)
		if out.Err != nil || out.Replayed != (i == 1) || string(out.Result) != `{"entry":"order-7"}` {
			t.Fatalf("delivery %d: got %+v, want success (a replay the second time)", i+1, out)
		}
	}
	scan, err := e.client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &entries})
	if err != nil || len(scan.Items) != 1 || runs != 1 {
		t.Errorf("got %d entries (%v) after %d runs, want 1 entry after 1 run", len(scan.Items), err, runs)
	}
}

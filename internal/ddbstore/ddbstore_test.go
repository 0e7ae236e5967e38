package ddbstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/truora/minidyn/server"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/faults"
	"github.com/oncely/oncely/internal/testing/storetest"
	conformance "github.com/oncely/oncely/storetest"
)

// env is one DynamoDB-compatible server with a fresh table.
type env struct {
	client  *dynamodb.Client
	counter *ddblocal.Counter
	table   string
	store   *ddbstore.Store
}

func newEnv(t *testing.T, endpoint string, transport http.RoundTripper) *env {
	t.Helper()
	return newEnvConfig(t, ddblocal.Config(endpoint, transport))
}

func newEnvConfig(t *testing.T, cfg aws.Config) *env {
	t.Helper()
	client, counter := ddblocal.Client(cfg)
	table := ddblocal.NewTable(t, client)
	store, err := ddbstore.New(client, table, "test-fn")
	if err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	return &env{client: client, counter: counter, table: table, store: store}
}

func minidynEnv(t *testing.T) *env {
	_, ep := ddblocal.Minidyn(t)
	return newEnv(t, ep, nil)
}

func motoEnv(t *testing.T) *env {
	return newEnv(t, ddblocal.MotoEndpoint(t), nil)
}

// harness runs the public suite on one server, with faults injected
// between the store and that server for the classification tests, poison
// notes, and effects (puts into a second table).
func harness(endpoint string) conformance.Harness {
	var shared *ddbstore.Admin
	return conformance.Harness{
		NewStore: func(t *testing.T) idem.Store {
			if shared == nil {
				shared = newEnv(t, endpoint, nil).admin(t)
			}
			return shared
		},
		NewFaulty: func(t *testing.T, f conformance.Fault) (idem.Store, string) {
			k := faults.Kind(f)
			ft := &faults.Transport{Replies: ddblocal.Replies}
			cfg := ddblocal.Config(endpoint, ft)
			cfg.Retryer = quickRetryer
			e := newEnvConfig(t, cfg)
			ft.Decide = func(req *http.Request) faults.Kind {
				if slices.Contains(ddblocal.StoreOperations, ddblocal.Operation(req)) {
					return k
				}
				return faults.None
			}
			return e.store, e.table
		},
		Poison:  func(t *testing.T) idem.PoisonStore { return newEnv(t, endpoint, nil).store },
		Effects: func(t *testing.T) conformance.EffectHarness { return effectHarness(t, endpoint) },
	}
}

// quickRetryer is the SDK's own standard retryer with short backoffs, to
// keep fault tests quick.
func quickRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = retry.NewExponentialJitterBackoff(20 * time.Millisecond) })
}

// The public conformance suite (store, poison notes, effects) and the
// operators' suite, on minidyn and on moto.
func TestConformanceMinidyn(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	conformance.Run(t, harness(ep))
	storetest.RunOperatorTests(t, operatorHarness(ep))
}

func TestConformanceMoto(t *testing.T) {
	ep := ddblocal.MotoEndpoint(t)
	conformance.Run(t, harness(ep))
	storetest.RunOperatorTests(t, operatorHarness(ep))
}

// TestAbandonedActionStaysFencedMinidyn: the late return of an action the
// engine abandoned cannot overwrite the record of the delivery that took
// the key over, with DynamoDB's conditional writes (RunAbandonTests).
func TestAbandonedActionStaysFencedMinidyn(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	store := newEnv(t, ep, nil).store
	storetest.RunAbandonTests(t, func(*testing.T) idem.Store { return store })
}

// operatorHarness gives the operator suite one Admin (keys are unique).
func operatorHarness(endpoint string) func(t *testing.T) storetest.OperatorStore {
	var shared *ddbstore.Admin
	return func(t *testing.T) storetest.OperatorStore {
		if shared == nil {
			shared = newEnv(t, endpoint, nil).admin(t)
		}
		return shared
	}
}

func (e *env) admin(t *testing.T) *ddbstore.Admin {
	t.Helper()
	a, err := ddbstore.NewAdmin(e.client, e.table, "test-fn")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestConformanceRealAWS runs the suite against a real table when
// IDEM_TEST_AWS_TABLE names one (with credentials and region from the
// environment, as the AWS CLI takes them).
func TestConformanceRealAWS(t *testing.T) {
	table := os.Getenv(ddblocal.EnvAWSTable)
	if table == "" {
		t.Skipf("set %s (and AWS credentials) to run against real DynamoDB", ddblocal.EnvAWSTable)
	}
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	store, err := ddbstore.New(dynamodb.NewFromConfig(cfg), table, "conformance")
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, conformance.Harness{NewStore: func(*testing.T) idem.Store { return store },
		Poison: func(*testing.T) idem.PoisonStore { return store }})
}

func engineOn(t *testing.T, s idem.Store) *idem.Engine {
	t.Helper()
	e, err := idem.New(idem.Options{Store: s, Lease: time.Minute, Retry: idem.RetryPolicy{Base: time.Millisecond}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func request(t *testing.T, key, payload string) idem.Request {
	t.Helper()
	r, err := idem.NewRequest(key, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCallCounts pins the store calls per outcome, on a server that returns
// the old item with a failed condition (moto) and on one that does not
// (minidyn, which pays one GetItem more for duplicates).
func TestCallCounts(t *testing.T) {
	servers := []struct {
		name    string
		env     func(*testing.T) *env
		dupCost map[string]int // calls for a duplicate
	}{
		{"moto", motoEnv, map[string]int{"PutItem": 1}},
		{"minidyn", minidynEnv, map[string]int{"PutItem": 1, "GetItem": 1}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			e := srv.env(t)
			eng := engineOn(t, e.store)
			ctx := context.Background()
			ok := func(context.Context) ([]byte, error) { return []byte(`"ok"`), nil }
			measure := func(name string, want map[string]int, fn func()) {
				t.Helper()
				e.counter.Reset()
				fn()
				if diff := cmp.Diff(want, e.counter.Counts()); diff != "" {
					t.Errorf("%s: calls (-want +got):\n%s", name, diff)
				}
			}
			measure("fresh key then success", map[string]int{"PutItem": 1, "UpdateItem": 1}, func() {
				if _, err := eng.Do(ctx, request(t, "evt:count-1:notify", `{"a":1}`), ok); err != nil {
					t.Fatal(err)
				}
			})
			measure("duplicate of a succeeded key", srv.dupCost, func() {
				if out, err := eng.Do(ctx, request(t, "evt:count-1:notify", `{"a":1}`), ok); err != nil || !out.Replayed {
					t.Fatalf("got %+v %v; want replay", out, err)
				}
			})
			measure("reuse with another payload", srv.dupCost, func() {
				if _, err := eng.Do(ctx, request(t, "evt:count-1:notify", `{"a":2}`), ok); !errors.Is(err, idem.ErrKeyReused) {
					t.Fatalf("got %v; want KEY_REUSED", err)
				}
			})
			measure("permanent failure", map[string]int{"PutItem": 1, "UpdateItem": 1}, func() {
				_, err := eng.Do(ctx, request(t, "evt:count-2:notify", `{}`), func(context.Context) ([]byte, error) { return nil, idem.Permanent(errors.New("no")) })
				if errCode(err) != idem.CodePermanentFailure {
					t.Fatalf("got %v", err)
				}
			})
			inAction, release := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			go func() {
				_, err := eng.Do(ctx, request(t, "evt:count-3:notify", `{}`), func(context.Context) ([]byte, error) {
					close(inAction)
					<-release
					return nil, nil
				})
				done <- err
			}()
			<-inAction
			measure("duplicate of an in-progress key", srv.dupCost, func() {
				if _, err := eng.Do(ctx, request(t, "evt:count-3:notify", `{}`), ok); !errors.Is(err, idem.ErrInProgress) {
					t.Fatalf("got %v; want IN_PROGRESS", err)
				}
			})
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func errCode(err error) idem.Code {
	if e, ok := errors.AsType[*idem.Error](err); ok {
		return e.Code
	}
	return ""
}

// --- Cross-process race ---

const (
	envRaceWorker = "DDBSTORE_RACE_WORKER"
	raceProcesses = 8
	raceRounds    = 50
)

// TestCrossProcessRace starts 8 OS processes that reserve the same key at
// the same instant, 50 rounds over: each round has exactly one winner.
func TestCrossProcessRace(t *testing.T) {
	if os.Getenv(envRaceWorker) != "" {
		raceWorker(t)
		return
	}
	e := motoEnv(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now().Add(2 * time.Second).UnixMilli()
	var outs []*bytes.Buffer
	var cmds []*exec.Cmd
	for p := range raceProcesses {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrossProcessRace$", "-test.count=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), envRaceWorker+"=1",
			"RACE_ENDPOINT="+ddblocal.MotoEndpoint(t), "RACE_TABLE="+e.table, "RACE_RUN="+run,
			"RACE_START="+strconv.FormatInt(start, 10), "RACE_PROC="+strconv.Itoa(p))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	winners := make([]int, raceRounds)
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", p, err, outs[p])
		}
		for _, line := range strings.Split(outs[p].String(), "\n") {
			var round int
			if _, err := fmt.Sscanf(line, "WON %d", &round); err == nil {
				winners[round]++
			}
		}
	}
	for round, n := range winners {
		if n != 1 {
			t.Errorf("round %d: %d winners among %d processes; want exactly 1", round, n, raceProcesses)
		}
	}
}

func raceWorker(t *testing.T) {
	client, _ := ddblocal.Client(ddblocal.Config(os.Getenv("RACE_ENDPOINT"), nil))
	store, err := ddbstore.New(client, os.Getenv("RACE_TABLE"), "race")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := strconv.ParseInt(os.Getenv("RACE_START"), 10, 64)
	for round := range raceRounds {
		// Every process wakes at the same instant for each round.
		time.Sleep(time.Until(time.UnixMilli(start + int64(round)*40)))
		now := time.Now()
		var tok [16]byte
		_, _ = rand.Read(tok[:])
		_, won, err := store.Reserve(context.Background(), idem.Reservation{
			Key: fmt.Sprintf("evt:race-%s-%d:x", os.Getenv("RACE_RUN"), round), Fingerprint: strings.Repeat("a", 64),
			Token: fmt.Sprintf("%x", tok), Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour),
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if won {
			fmt.Printf("WON %d\n", round)
		}
	}
}

// --- Faults in the HTTP path ---

// faultTransport injects, into the operations in ops (nil: the store's),
// the fault chosen per call: "" passes through, "reset" and "lost-reply"
// are package faults' Reset and DropReply, and "<status> <type>" is a
// DynamoDB error reply of that status and type.
type faultTransport struct {
	fault func(op string, n int64) string
	calls atomic.Int64
	ops   []string
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := ddblocal.Operation(req)
	ops := f.ops
	if ops == nil {
		ops = ddblocal.StoreOperations
	}
	spec := ""
	if slices.Contains(ops, op) {
		spec = f.fault(op, f.calls.Add(1))
	}
	kind := faults.None
	switch spec {
	case "":
	case "reset":
		kind = faults.Reset
	case "lost-reply":
		kind = faults.DropReply
	default:
		status, typ, _ := strings.Cut(spec, " ")
		code, _ := strconv.Atoi(status)
		return ddblocal.ErrorReply(req, code, typ), nil
	}
	return (&faults.Transport{Decide: func(*http.Request) faults.Kind { return kind }}).RoundTrip(req)
}

func faultEnv(t *testing.T, fault func(op string, n int64) string) (*env, *faultTransport) {
	_, ep := ddblocal.Minidyn(t)
	ft := &faultTransport{fault: func(string, int64) string { return "" }}
	cfg := ddblocal.Config(ep, ft)
	// The SDK's own standard retryer, with short backoffs to keep the test quick.
	cfg.Retryer = quickRetryer
	e := newEnvConfig(t, cfg)
	ft.fault = fault
	return e, ft
}

func TestFaultsAreClassified(t *testing.T) {
	tests := []struct {
		fault string
		want  idem.Class
		text  string
	}{
		{"400 ProvisionedThroughputExceededException", idem.ClassTransient, "ProvisionedThroughputExceeded"},
		{"400 ThrottlingException", idem.ClassTransient, "Throttling"},
		{"400 RequestLimitExceeded", idem.ClassTransient, "RequestLimitExceeded"},
		{"500 InternalServerError", idem.ClassTransient, "InternalServerError"},
		{"503 ServiceUnavailable", idem.ClassTransient, "503"},
		{"reset", idem.ClassOutcomeUnknown, "reset"},
		{"lost-reply", idem.ClassOutcomeUnknown, "reset"},
		{"400 ResourceNotFoundException", idem.ClassPermanent, "create it"},
		{"400 AccessDeniedException", idem.ClassPermanent, "dynamodb:PutItem"},
		{"400 ExpiredTokenException", idem.ClassTransient, "refused the credentials"},
		{"400 UnrecognizedClientException", idem.ClassPermanent, "missing, invalid or expired"},
		{"400 ValidationException", idem.ClassPermanent, "key schema"},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			e, ft := faultEnv(t, func(string, int64) string { return tt.fault })
			now := time.Now()
			_, acquired, err := e.store.Reserve(context.Background(), idem.Reservation{
				Key: "evt:fault-1:x", Fingerprint: strings.Repeat("a", 64), Token: "t1", Now: now,
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour),
			})
			if acquired || err == nil {
				t.Fatalf("Reserve under %q = acquired %v, err %v; want an error, not acquired", tt.fault, acquired, err)
			}
			if got := idem.Classify(err); got != tt.want {
				t.Errorf("class %v; want %v (%v)", got, tt.want, err)
			}
			if !strings.Contains(err.Error(), tt.text) || !strings.Contains(err.Error(), e.table) {
				t.Errorf("error %q does not name %q and the table", err, tt.text)
			}
			if tt.want == idem.ClassPermanent && ft.calls.Load() != 1 {
				t.Errorf("a permanent error was retried: %d calls", ft.calls.Load())
			}
		})
	}
}

// The SDK's retryer retries throttling; the store adds no loop of its own,
// and a retried success is reported as the success it is.
func TestThrottledOnceSucceedsThroughSDKRetry(t *testing.T) {
	e, ft := faultEnv(t, func(op string, n int64) string {
		if n == 1 {
			return "400 ThrottlingException"
		}
		return ""
	})
	out, err := engineOn(t, e.store).Do(context.Background(), request(t, "evt:throttle-1:x", `{}`), func(context.Context) ([]byte, error) { return []byte(`1`), nil })
	if err != nil || !out.Stored {
		t.Fatalf("got %+v %v; want stored success", out, err)
	}
	if ft.calls.Load() != 3 || e.counter.Total() != 2 {
		t.Errorf("HTTP requests %d, store calls %d; want 3 requests (one SDK retry) for 2 calls", ft.calls.Load(), e.counter.Total())
	}
}

// A reservation whose reply was lost lands anyway; the SDK re-sends it, the
// re-send fails its condition on our own record, and we still own the key.
func TestLostReplyOnReserveStillOwned(t *testing.T) {
	e, _ := faultEnv(t, func(op string, n int64) string {
		if n == 1 {
			return "lost-reply"
		}
		return ""
	})
	var calls atomic.Int64
	out, err := engineOn(t, e.store).Do(context.Background(), request(t, "evt:lost-1:x", `{}`), func(context.Context) ([]byte, error) {
		calls.Add(1)
		return []byte(`"sent"`), nil
	})
	if err != nil || !out.Stored || calls.Load() != 1 || out.Attempts != 1 {
		t.Fatalf("got %+v %v calls %d; want one stored execution at attempt 1", out, err, calls.Load())
	}
}

// When the store is down, nothing is reported as reserved or completed.
func TestOutageNeverReportsSuccess(t *testing.T) {
	var down atomic.Bool
	e, _ := faultEnv(t, func(op string, n int64) string {
		if down.Load() {
			return "503 ServiceUnavailable"
		}
		return ""
	})
	eng := engineOn(t, e.store)
	var calls atomic.Int64
	act := func(context.Context) ([]byte, error) { calls.Add(1); return []byte(`1`), nil }
	down.Store(true)
	out, err := eng.Do(context.Background(), request(t, "evt:down-1:x", `{}`), act)
	if errCode(err) != idem.CodeStoreUnavailable || out.Stored || calls.Load() != 0 {
		t.Fatalf("reserve during outage: %+v %v calls %d; want STORE_UNAVAILABLE, nothing run", out, err, calls.Load())
	}
	// The store fails after the action ran: the outcome must not claim success.
	down.Store(false)
	out, err = eng.Do(context.Background(), request(t, "evt:down-2:x", `{}`), func(ctx context.Context) ([]byte, error) {
		down.Store(true)
		return act(ctx)
	})
	if errCode(err) != idem.CodeStoreUnavailable || out.Stored {
		t.Fatalf("completion during outage: %+v %v; want STORE_UNAVAILABLE, not stored", out, err)
	}
}

func TestMinidynOutageEmulation(t *testing.T) {
	srv, ep := ddblocal.Minidyn(t)
	e := newEnv(t, ep, nil)
	srv.EmulateFailure(server.FailureConditionInternalServerError)
	_, _, err := e.store.Get(context.Background(), "evt:emulated-1:x", time.Now())
	if idem.Classify(err) != idem.ClassTransient {
		t.Fatalf("Get under minidyn's emulated failure: %v (class %v); want transient", err, idem.Classify(err))
	}
}

func TestResultSizes(t *testing.T) {
	e := minidynEnv(t)
	now := time.Now()
	reserve := func(key string) idem.Reservation {
		r := idem.Reservation{Key: key, Fingerprint: strings.Repeat("a", 64), Token: "tok-" + key, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		if _, ok, err := e.store.Reserve(context.Background(), r); err != nil || !ok {
			t.Fatalf("Reserve: %v %v", ok, err)
		}
		return r
	}
	random := func(n int) []byte { b := make([]byte, n); _, _ = rand.Read(b); return b }
	tests := []struct {
		name   string
		result []byte
		ok     bool
	}{
		{"small stored as is", []byte(`{"ok":true}`), true},
		{"compressible 1 MiB gzipped", bytes.Repeat([]byte(`{"line":"the same line"},`), 40000), true},
		{"incompressible 300 KiB gzipped", random(300 * 1024), true},
		{"incompressible 500 KiB too large", random(500 * 1024), false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reserve(fmt.Sprintf("evt:size-%d:x", i))
			err := e.store.Complete(context.Background(), idem.Finish{Key: r.Key, Token: r.Token, Now: now, Attempts: 1, ExpiresAt: now.Add(time.Hour), Result: tt.result})
			if !tt.ok {
				var ce *idem.ClassifiedError
				if !errors.As(err, &ce) || ce.Code != idem.CodeResultTooLarge || ce.Class != idem.ClassPermanent ||
					!strings.Contains(err.Error(), strconv.Itoa(len(tt.result))) || !strings.Contains(err.Error(), "400 KB") {
					t.Fatalf("Complete = %v; want permanent RESULT_TOO_LARGE naming the size and the limit", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			rec, _, err := e.store.Get(context.Background(), r.Key, now)
			if err != nil || !bytes.Equal(rec.Result, tt.result) {
				t.Fatalf("Get: %v; result %d bytes, want %d bytes byte for byte", err, len(rec.Result), len(tt.result))
			}
		})
	}
	// Through the engine, a too-large result marks the record failed.
	out, err := engineOn(t, e.store).Do(context.Background(), request(t, "evt:size-big:x", `{}`), func(context.Context) ([]byte, error) { return random(500 * 1024), nil })
	if errCode(err) != idem.CodeResultTooLarge || !out.Stored {
		t.Fatalf("engine: %+v %v; want stored RESULT_TOO_LARGE", out, err)
	}
	if rec, _, _ := e.store.Get(context.Background(), "evt:size-big:x", time.Now()); rec.Status != idem.StatusFailed || rec.ErrorCode != idem.CodeResultTooLarge {
		t.Errorf("record %s %s; want FAILED RESULT_TOO_LARGE", rec.Status, rec.ErrorCode)
	}
}

func TestItemEncoding(t *testing.T) {
	e := minidynEnv(t)
	now := time.UnixMilli(time.Now().UnixMilli())
	r := idem.Reservation{Key: "evt:enc-1:x", Fingerprint: strings.Repeat("f", 64), Token: "tok", Now: now,
		LeaseUntil: now.Add(1500 * time.Millisecond), ExpiresAt: now.Add(90 * time.Minute).Add(300 * time.Millisecond)}
	if _, ok, err := e.store.Reserve(context.Background(), r); !ok || err != nil {
		t.Fatal(ok, err)
	}
	out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "test-fn#evt:enc-1:x"}}})
	if err != nil {
		t.Fatal(err)
	}
	num := func(a string) string { return out.Item[a].(*types.AttributeValueMemberN).Value }
	want := map[string]string{
		"lease_until": strconv.FormatInt(r.LeaseUntil.UnixMilli(), 10),
		"expires_at":  strconv.FormatInt(r.ExpiresAt.Unix()+1, 10), // epoch seconds, rounded up
		"created_at":  strconv.FormatInt(now.UnixMilli(), 10),
		"attempts":    "1",
	}
	for a, w := range want {
		if got := num(a); got != w {
			t.Errorf("%s = %s; want %s", a, got, w)
		}
	}
	if s := out.Item["status"].(*types.AttributeValueMemberS).Value; s != "IN_PROGRESS" {
		t.Errorf("status %s", s)
	}
	// A malformed item (another writer shares the table) is a clear permanent error.
	_, err = e.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "test-fn#evt:enc-2:x"}, "attempts": &types.AttributeValueMemberS{Value: "one"},
		"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(time.Hour).Unix(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.Get(context.Background(), "evt:enc-2:x", now); idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "attempts") {
		t.Errorf("malformed item: %v; want a permanent error naming attribute attempts", err)
	}
}

func TestNewValidates(t *testing.T) {
	client, _ := ddblocal.Client(ddblocal.Config("http://127.0.0.1:1", nil))
	for _, tt := range []struct{ table, ns, want string }{
		{"", "fn", "table"}, {"t", "", "namespace"}, {"t", "a#b", "namespace"},
	} {
		if _, err := ddbstore.New(client, tt.table, tt.ns); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%q, %q) = %v; want an error naming %s", tt.table, tt.ns, err, tt.want)
		}
	}
	if _, err := ddbstore.New(nil, "t", "fn"); err == nil {
		t.Errorf("New(nil client) succeeded")
	}
}

// TestProbe: the init's probe tells a misconfiguration (permanent, naming
// the table and DynamoDB's error code) from an outage (transient).
func TestProbe(t *testing.T) {
	if err := minidynEnv(t).store.Probe(context.Background()); err != nil {
		t.Fatalf("Probe on the store's own table: %v", err)
	}
	_, ep := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	other := ddblocal.NewTableKeyedBy(t, client, "keyed-by-id", "id")
	for _, tt := range []struct {
		table, code string
	}{{"no-such-table", "ResourceNotFoundException"}, {other, "ValidationException"}} {
		store, _ := ddbstore.New(client, tt.table, "fn")
		err := store.Probe(context.Background())
		if idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), `table "`+tt.table+`": `+tt.code) {
			t.Errorf("Probe on %s: %v; want a permanent error naming the table and %s", tt.table, err, tt.code)
		}
	}
	for _, tt := range []struct {
		fault string
		class idem.Class
	}{
		{"400 AccessDeniedException", idem.ClassPermanent},
		{"400 ThrottlingException", idem.ClassTransient},
		{"500 InternalServerError", idem.ClassTransient},
	} {
		e, _ := faultEnv(t, func(string, int64) string { return tt.fault })
		err := e.store.Probe(context.Background())
		_, code, _ := strings.Cut(tt.fault, " ")
		if idem.Classify(err) != tt.class || !strings.Contains(err.Error(), `table "`+e.table+`": `+code) {
			t.Errorf("Probe under %s: %v (%v); want %v, naming the table and %s", tt.fault, err, idem.Classify(err), tt.class, code)
		}
		var call *ddbstore.CallError
		if !errors.As(err, &call) || call.Table != e.table || call.Code != code || call.Op != "GetItem" {
			t.Errorf("Probe under %s: %#v; want a *CallError with the table, GetItem and %s", tt.fault, call, code)
		}
	}
}

func TestMissingTableIsConfigurationError(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	store, _ := ddbstore.New(client, "no-such-table", "fn")
	_, _, err := store.Get(context.Background(), "evt:missing-1:x", time.Now())
	if idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), `"no-such-table"`) {
		t.Fatalf("got %v; want a permanent error naming the table", err)
	}
}

// A CreateTable whose reply is lost is retried by the SDK, and the retry
// finds the table the first attempt made: that is our own table, not an
// error (seen in CI against moto). Without a retry, an existing table is
// still an error.
func TestCreateTableSurvivesItsOwnRetry(t *testing.T) {
	for _, server := range []string{"minidyn", "moto"} {
		t.Run(server, func(t *testing.T) {
			var ep string
			if server == "moto" {
				ep = ddblocal.MotoEndpoint(t)
			} else {
				_, ep = ddblocal.Minidyn(t)
			}
			var mu sync.Mutex
			lost := map[string]int{}
			ft := &faultTransport{ops: []string{"CreateTable", "UpdateTimeToLive"}, fault: func(op string, _ int64) string {
				mu.Lock()
				defer mu.Unlock()
				switch lost[op]++; {
				case lost[op] == 1:
					return "lost-reply" // the first of each: the server acts, the reply is lost
				case lost[op] == 2 && op == "UpdateTimeToLive":
					// What DynamoDB answers a second enable (moto accepts it).
					return "400 ValidationException"
				}
				return ""
			}}
			// Every attempt's outcome, for the failure message: a real
			// retryable error on the last call (seen once under load) makes
			// it look like its own retry.
			attempts := &attemptRecorder{base: ft}
			cfg := ddblocal.Config(ep, attempts)
			cfg.Retryer = quickRetryer
			client, _ := ddblocal.Client(cfg)
			table := "idem-retry-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			ttl, err := ddbstore.CreateTable(context.Background(), client, table)
			if server == "minidyn" && errors.Is(err, ddbstore.ErrNoTTL) {
				err = nil // minidyn has no TTL API
			} else if !ttl {
				t.Errorf("TTL not reported enabled after a lost reply to UpdateTimeToLive (err %v)", err)
			}
			if err != nil {
				t.Fatalf("CreateTable after lost replies: %v", err)
			}
			mu.Lock()
			creates, enables := lost["CreateTable"], lost["UpdateTimeToLive"]
			mu.Unlock()
			if creates != 2 {
				t.Fatalf("CreateTable reached the server %d times; want 2 (the lost reply, then the SDK's retry)", creates)
			}
			if server == "moto" && enables != 2 {
				t.Fatalf("UpdateTimeToLive reached the server %d times; want 2", enables)
			}
			if _, err := client.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: &table}); err != nil {
				t.Fatalf("table missing after CreateTable: %v", err)
			}
			attempts.reset()
			_, err = ddbstore.CreateTable(context.Background(), client, table)
			if _, ok := errors.AsType[*types.ResourceInUseException](err); !ok {
				t.Fatalf("CreateTable on an existing table without a retry = %v; want ResourceInUseException (attempts: %s)", err, attempts)
			}
		})
	}
}

// attemptRecorder records each request's operation and outcome.
type attemptRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	log  []string
}

func (a *attemptRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	op, start := ddblocal.Operation(req), time.Now()
	resp, err := a.base.RoundTrip(req)
	out := fmt.Sprint(err)
	if err == nil {
		out = resp.Status
	}
	a.mu.Lock()
	a.log = append(a.log, fmt.Sprintf("%s %s after %v", op, out, time.Since(start).Round(time.Millisecond)))
	a.mu.Unlock()
	return resp, err
}

func (a *attemptRecorder) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.log = nil
}

func (a *attemptRecorder) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.log, "; ")
}

// deadlineRecorder records the deadline of every request's context: the
// SDK's retries carry the caller's context, so every attempt must end by
// the store deadline the engine's budget sets.
type deadlineRecorder struct {
	base      http.RoundTripper
	mu        sync.Mutex
	deadlines []time.Time
}

func (d *deadlineRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	dl, _ := req.Context().Deadline()
	d.mu.Lock()
	d.deadlines = append(d.deadlines, dl)
	d.mu.Unlock()
	return d.base.RoundTrip(req)
}

// With DynamoDB throttling every request, the SDK's standard retryer (its
// default backoff, up to 20 s) would run past a 3 s invocation. Every
// attempt carries the engine's store deadline instead, and the outcome of a
// call cut short is STORE_UNAVAILABLE, never a timed-out invocation.
func TestStoreRetriesEndWithinTheInvocationBudget(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	var throttle atomic.Bool
	rec := &deadlineRecorder{base: &faults.Transport{Replies: ddblocal.Replies, Decide: func(req *http.Request) faults.Kind {
		if throttle.Load() && slices.Contains(ddblocal.StoreOperations, ddblocal.Operation(req)) {
			return faults.Throttle
		}
		return faults.None
	}}}
	e := newEnvConfig(t, ddblocal.Config(ep, rec)) // the SDK's default retryer
	budget := idem.Budget{StoreReserve: 300 * time.Millisecond, RespondReserve: 200 * time.Millisecond}
	eng, err := idem.New(idem.Options{Store: e.store, Budget: budget, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	throttle.Store(true)
	rec.mu.Lock()
	rec.deadlines = nil
	rec.mu.Unlock()
	deadline := time.Now().Add(900 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var ran atomic.Bool
	out, err := eng.Do(ctx, request(t, "evt:throttled-1:x", `{}`), func(context.Context) ([]byte, error) { ran.Store(true); return []byte(`1`), nil })
	if errCode(err) != idem.CodeStoreUnavailable || out.Stored || ran.Load() {
		t.Fatalf("Do under constant throttling = %+v, %v; want STORE_UNAVAILABLE, nothing run", out, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.deadlines) == 0 {
		t.Fatal("no request reached the transport")
	}
	want := budget.StoreDeadline(deadline)
	for i, dl := range rec.deadlines {
		if dl.IsZero() || dl.After(want) {
			t.Errorf("attempt %d carried deadline %v; want one by the store deadline %v", i+1, dl, want)
		}
	}
}

// effectHarness runs the EffectStore suite on a server: effects are puts
// into a second table, each on the condition that its item is new.
func effectHarness(t *testing.T, endpoint string) conformance.EffectHarness {
	e := newEnv(t, endpoint, nil)
	other := ddblocal.NewTable(t, e.client)
	put := func(name string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{
			TableName:           &other,
			Item:                map[string]types.AttributeValue{ddbstore.AttrPK: &types.AttributeValueMemberS{Value: name}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}
	}
	exists := func(t *testing.T, name string) bool {
		out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &other, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{ddbstore.AttrPK: &types.AttributeValueMemberS{Value: name}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Item) > 0
	}
	return conformance.EffectHarness{
		Store:  e.store,
		Write:  func(t *testing.T, name string) idem.Effects { return ddbstore.Effects{put(name)} },
		Exists: exists,
		Conflict: func(t *testing.T, name string) idem.Effects {
			taken := name + "-taken"
			if _, err := e.client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &other, Item: put(taken).Put.Item}); err != nil {
				t.Fatal(err)
			}
			return ddbstore.Effects{put(name), put(taken)}
		},
		TooMany: func(t *testing.T, prefix string) idem.Effects {
			var eff ddbstore.Effects
			for i := range ddbstore.MaxEffects + 1 {
				eff = append(eff, put(fmt.Sprintf("%s-%d", prefix, i)))
			}
			return eff
		},
		Twice: func(t *testing.T, name string) idem.Effects { return ddbstore.Effects{put(name), put(name)} },
	}
}

// replyTransport answers the operations in ops with a fixed DynamoDB error
// body, and forwards the rest.
type replyTransport struct {
	ops    []string
	status int
	body   string
}

func (r *replyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !slices.Contains(r.ops, ddblocal.Operation(req)) {
		return http.DefaultTransport.RoundTrip(req)
	}
	// The error type is the body's __type: the SDK reads it from the header too.
	typ := r.body[strings.Index(r.body, "#")+1 : strings.Index(r.body, `","message"`)]
	resp := ddblocal.ErrorReply(req, r.status, typ)
	resp.Body = io.NopCloser(strings.NewReader(r.body))
	return resp, nil
}

// How a refused commit is classified: throttling and conflicts are
// transient (retried; nothing was applied), a commit still in progress is
// an unknown outcome (sent again, then read back), and a transaction
// DynamoDB finds invalid is the action's fault, stored as INVALID_EFFECTS.
func TestEffectCommitErrorsAreClassified(t *testing.T) {
	reply := func(typ, extra string) *replyTransport {
		return &replyTransport{ops: []string{"TransactWriteItems"}, status: 400,
			body: `{"__type":"com.amazonaws.dynamodb.v20120810#` + typ + `","message":"injected"` + extra + `}`}
	}
	tests := []struct {
		name  string
		rt    *replyTransport
		class idem.Class
		code  idem.Code
	}{
		{"throttled", reply("ThrottlingException", ""), idem.ClassTransient, ""},
		{"cancelled on a conflict", reply("TransactionCanceledException", `,"CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict"}]`), idem.ClassTransient, ""},
		{"conflict exception", reply("TransactionConflictException", ""), idem.ClassTransient, ""},
		{"still in progress", reply("TransactionInProgressException", ""), idem.ClassOutcomeUnknown, ""},
		{"invalid", reply("ValidationException", ""), idem.ClassPermanent, idem.CodeInvalidEffects},
		{"cancelled by throttling", reply("TransactionCanceledException", `,"CancellationReasons":[{"Code":"None"},{"Code":"ThrottlingError"}]`), idem.ClassTransient, ""},
		{"cancelled over the request limit", reply("TransactionCanceledException", `,"CancellationReasons":[{"Code":"RequestLimitExceeded"},{"Code":"None"}]`), idem.ClassTransient, ""},
		{"cancelled on an invalid write", reply("TransactionCanceledException", `,"CancellationReasons":[{"Code":"None"},{"Code":"ValidationError","Message":"too large"}]`), idem.ClassPermanent, idem.CodeInvalidEffects},
		{"a repeat that differed", reply("IdempotentParameterMismatchException", ""), idem.ClassPermanent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ep := ddblocal.Minidyn(t)
			cfg := ddblocal.Config(ep, tt.rt)
			cfg.Retryer = quickRetryer
			e := newEnvConfig(t, cfg)
			now := time.Now()
			r := idem.Reservation{Key: "evt:tx-1:ledger", Fingerprint: strings.Repeat("a", 64), Token: "t1", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
			if _, ok, err := e.store.Reserve(context.Background(), r); err != nil || !ok {
				t.Fatal(err)
			}
			eff := ddbstore.Effects{{Put: &types.Put{TableName: &e.table, Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "entry"}}}}}
			err := e.store.CompleteWithEffects(context.Background(), idem.Finish{Key: r.Key, Token: "t1", Now: now, Attempts: 1, ExpiresAt: now.Add(time.Hour)}, eff)
			var ce *idem.ClassifiedError
			errors.As(err, &ce)
			if idem.Classify(err) != tt.class || (tt.code != "" && (ce == nil || ce.Code != tt.code)) {
				t.Errorf("got %v (%v); want class %v code %q", err, idem.Classify(err), tt.class, tt.code)
			}
		})
	}
}

// Limits checked before anything is sent: an item over DynamoDB's 400 KB,
// a write to the record's own table named by its ARN, and a write that
// sets two kinds at once.
func TestEffectLimitsCheckedBeforeSending(t *testing.T) {
	e := minidynEnv(t)
	now := time.Now()
	r := idem.Reservation{Key: "evt:tx-2:ledger", Fingerprint: strings.Repeat("a", 64), Token: "t2", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if _, ok, err := e.store.Reserve(context.Background(), r); err != nil || !ok {
		t.Fatal(err)
	}
	arn := "arn:aws:dynamodb:us-east-1:123456789012:table/" + e.table
	for name, eff := range map[string]ddbstore.Effects{
		"item over 400 KB": {{Put: &types.Put{TableName: aws.String("other"), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "big"}, "v": &types.AttributeValueMemberS{Value: strings.Repeat("x", 410_000)}}}}},
		"the record itself, by ARN": {{Update: &types.Update{TableName: &arn, UpdateExpression: aws.String("SET x = :x"),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "test-fn#" + r.Key}},
			ExpressionAttributeValues: map[string]types.AttributeValue{":x": &types.AttributeValueMemberN{Value: "1"}}}}},
		"a Put and a Delete in one write": {{
			Put:    &types.Put{TableName: aws.String("other"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "a"}}},
			Delete: &types.Delete{TableName: aws.String("other"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "b"}}}}},
	} {
		e.counter.Reset()
		err := e.store.CompleteWithEffects(context.Background(), idem.Finish{Key: r.Key, Token: "t2", Now: now, Attempts: 1, ExpiresAt: now.Add(time.Hour)}, eff)
		var ce *idem.ClassifiedError
		if !errors.As(err, &ce) || ce.Code != idem.CodeInvalidEffects || e.counter.Total() != 0 {
			t.Errorf("%s: %v after %d calls; want INVALID_EFFECTS before any call", name, err, e.counter.Total())
		}
	}
}

package notify_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// countingSecrets is a Secrets Manager holding one AWSCURRENT value (no
// other stage), which a test rotates, and counting GetSecretValue calls.
type countingSecrets struct {
	mu    sync.Mutex
	value string
	calls atomic.Int64
}

func (c *countingSecrets) set(key []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.value = base64.StdEncoding.EncodeToString(key)
}

func (c *countingSecrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.calls.Add(1)
	if aws.ToString(in.VersionStage) != secretsource.StageCurrent {
		return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(c.value)}, nil
}

// refusingSource is a real secretsource.Source on countingSecrets, read
// once (its refresh interval is long: only refusals read it again).
func refusingSource(t *testing.T, key []byte) (*secretsource.Source, *countingSecrets) {
	t.Helper()
	api := &countingSecrets{}
	api.set(key)
	src := secretsource.New(api, "webhook", time.Hour, slog.New(slog.DiscardHandler))
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	api.calls.Store(0)
	return src, api
}

// A receiver refusing every signature (it holds another secret), reached
// by deliveries in flight at once.
func refusingReceiver(t *testing.T, arrived *sync.WaitGroup, hold chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if arrived != nil {
			arrived.Done()
			<-hold
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// N deliveries refused at once make at most one re-read of the keys
// (AWSCURRENT, AWSPENDING, AWSPREVIOUS: three GetSecretValue calls), not
// one each: a receiver that refuses every signature must not multiply
// Secrets Manager calls until the account's quota throttles.
func TestConcurrentRefusalsShareOneReRead(t *testing.T) {
	const n = 8
	src, api := refusingSource(t, oldKey)
	var arrived sync.WaitGroup
	arrived.Add(n)
	hold := make(chan struct{})
	srv := refusingReceiver(t, &arrived, hold)
	nt := notify.New(srv.URL, 10*time.Second, notify.Classifier{})
	nt.Signer = src
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = nt.Do(context.Background(), action.Event{Key: "evt:refused-" + string(rune('a'+i)) + ":notify", Body: []byte(`{}`)})
		})
	}
	// Every POST is sent before any is refused.
	arrived.Wait()
	close(hold)
	wg.Wait()
	if c := api.calls.Load(); c > 3 {
		t.Errorf("%d GetSecretValue calls for %d concurrent refusals; want at most 3 (one re-read, shared)", c, n)
	}
	permanent := 0
	for i, err := range errs {
		switch idem.Classify(err) {
		case idem.ClassPermanent:
			permanent++
		case idem.ClassTransient:
		default:
			t.Errorf("delivery %d: %v (%v); want a permanent or a transient refusal", i, err, idem.Classify(err))
		}
	}
	// Every POST was sent before the re-read began, which read the keys
	// they were signed with: the refusals stand.
	if permanent != n {
		t.Errorf("%d of %d refusals permanent; want all (the shared re-read began after every POST was sent)", permanent, n)
	}
}

// Two refusals inside one recheck interval, with a rotation between them:
// the first re-read found the keys the first delivery was signed with (a
// permanent refusal), but the second delivery was signed before anyone
// read the rotated secret, and its re-read is suppressed by the interval.
// Whether its refusal is explained by the rotation is unknown: nothing
// permanent may be stored for it.
func TestRotationBetweenTwoRefusalsInOneIntervalStoresNothingPermanent(t *testing.T) {
	src, api := refusingSource(t, oldKey)
	srv := refusingReceiver(t, nil, nil)
	nt := notify.New(srv.URL, 10*time.Second, notify.Classifier{})
	nt.Signer = src
	if _, err := nt.Do(context.Background(), signedEvent()); idem.Classify(err) != idem.ClassPermanent {
		t.Fatalf("first refusal: %v (%v); want permanent (its re-read found the keys it was signed with)", err, idem.Classify(err))
	}
	api.set(newKey) // the rotation, not yet read by the process
	calls := api.calls.Load()
	_, err := nt.Do(context.Background(), action.Event{Key: "evt:signed-2:notify", Body: []byte(`{}`)})
	if idem.Classify(err) == idem.ClassPermanent {
		t.Errorf("second refusal, after a rotation, inside the interval: %v; want it not permanent", err)
	}
	if idem.Classify(err) != idem.ClassTransient {
		t.Errorf("second refusal: %v (%v); want transient", err, idem.Classify(err))
	}
	if c := api.calls.Load() - calls; c != 0 {
		t.Errorf("%d GetSecretValue calls for the second refusal; want none inside the interval", c)
	}
}

// A receiver that refuses every signature (its secret misconfigured) gets
// one POST per event in a delivery: 5 invocations of 10 events, through
// the engine as the adapters run it (3 attempts per delivery), make at
// most 50 POSTs. A refusal no read of the keys could judge ends the
// delivery (released, to come back), one the re-read judged is stored as
// permanent; nothing is acknowledged without a final record, and the
// keys' reads stay bounded (one re-read per invocation at the most: the
// recheck interval is 5 s, far longer than an invocation here).
func TestRefusingReceiverGetsOnePOSTPerEventInADelivery(t *testing.T) {
	const invocations, events = 5, 10
	src, api := refusingSource(t, oldKey)
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		posts.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	nt := notify.New(srv.URL, 10*time.Second, notify.Classifier{})
	nt.Signer = src
	store := memstore.New()
	engine, err := idem.New(idem.Options{
		Store:  store,
		Retry:  idem.RetryPolicy{AttemptsPerDelivery: 3, Base: time.Millisecond, Max: time.Second},
		Sleep:  func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	released, permanent := 0, 0
	for inv := range invocations {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		outs := make([]idem.Outcome, events)
		var wg sync.WaitGroup
		for i := range events {
			wg.Go(func() {
				e := action.Event{Key: fmt.Sprintf("evt:refused-%d-%d:notify", inv, i), Body: []byte(`{}`)}
				req, err := idem.NewRequest(e.Key, e.Body)
				if err != nil {
					t.Error(err)
					return
				}
				outs[i] = engine.DoWork(ctx, req, action.Work(nt.Do, e))
			})
		}
		wg.Wait()
		cancel()
		for _, out := range outs {
			rec, ok, err := store.Get(context.Background(), out.Key, time.Now())
			if err != nil || !ok {
				t.Fatalf("%s: no record (%v)", out.Key, err)
			}
			final := rec.Status == idem.StatusSucceeded || rec.Status == idem.StatusFailed && !rec.Retryable
			acknowledged := out.Err == nil || !out.Err.Retryable
			switch {
			case acknowledged && (!final || !out.Stored):
				t.Errorf("%s acknowledged (%v) with record %s retryable=%v, stored %v; want a final record", out.Key, out.Err, rec.Status, rec.Retryable, out.Stored)
			case acknowledged:
				permanent++
			case rec.Status != idem.StatusFailed || !rec.Retryable || rec.ErrorCode != idem.CodeTransientFailure:
				t.Errorf("%s released with record %s retryable=%v %s; want FAILED, retryable, TRANSIENT_FAILURE", out.Key, rec.Status, rec.Retryable, rec.ErrorCode)
			default:
				released++
			}
			if out.Calls != 1 {
				t.Errorf("%s: %d attempts in its first delivery; want 1 (a refusal ends the delivery)", out.Key, out.Calls)
			}
		}
	}
	if got, most := posts.Load(), int64(invocations*events); got > most {
		t.Errorf("%d POSTs in the first delivery of %d events; want at most %d (one each)", got, most, most)
	}
	if c, most := api.calls.Load(), int64(3*invocations); c > most {
		t.Errorf("%d GetSecretValue calls; want at most %d (three stages, one re-read per invocation at the most)", c, most)
	}
	t.Logf("%d POSTs; %d refusals released, %d stored as permanent; %d GetSecretValue calls", posts.Load(), released, permanent, api.calls.Load())
}

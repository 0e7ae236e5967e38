package notify_test

import (
	"context"
	"encoding/base64"
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

package secretsource

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// flakyAPI serves one AWSCURRENT version (no other stage); while down,
// every call fails as a Secrets Manager brownout does.
type flakyAPI struct {
	mu    sync.Mutex
	value string
	down  bool
	calls atomic.Int64
}

func (f *flakyAPI) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("503 Service Unavailable")
	}
	if aws.ToString(in.VersionStage) != StageCurrent {
		return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(f.value)}, nil
}

func (f *flakyAPI) set(value string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.value, f.down = value, down
}

// A failed refresh is tried again within seconds, not after 30 s: a
// rotation must not be missed for half a minute because Secrets Manager
// failed once. The clock is the cache's; no test time passes.
func TestAFailedRefreshIsRetriedWithinSeconds(t *testing.T) {
	first := base64.StdEncoding.EncodeToString([]byte("first key, 32 bytes long, okay."))
	second := base64.StdEncoding.EncodeToString([]byte("second key, 32 bytes long, yes."))
	api := &flakyAPI{value: first}
	var mu sync.Mutex
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	src := New(api, "webhook", time.Minute, slog.New(slog.DiscardHandler))
	src.cache.now = now
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Minute)
	api.set(second, true)
	if keys, err := src.Keys(context.Background()); err != nil || string(keys[0]) != "first key, 32 bytes long, okay." {
		t.Fatalf("keys during the failed refresh: %q, %v; want the first key", keys, err)
	}
	api.set(second, false)
	advance(3 * time.Second)
	keys, err := src.Keys(context.Background())
	if err != nil || len(keys) != 1 || string(keys[0]) != "second key, 32 bytes long, yes." {
		t.Fatalf("keys 3 s after a failed refresh: %q, %v (%d calls); want the second key, read again", keys, err, api.calls.Load())
	}
}

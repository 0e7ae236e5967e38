package secretsource

import (
	"context"
	"encoding/base64"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// panickyAPI answers with one AWSCURRENT version (no other stage), and
// panics on the calls numbered in panics: a bug in a library the refresh
// calls. Reload makes calls 1 to 3 (AWSCURRENT, AWSPENDING, AWSPREVIOUS).
type panickyAPI struct {
	value  atomic.Value // string
	calls  atomic.Int64
	panics map[int64]bool
}

func (p *panickyAPI) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if p.panics[p.calls.Add(1)] {
		panic("a bug in the secret read")
	}
	if aws.ToString(in.VersionStage) != "AWSCURRENT" {
		return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(p.value.Load().(string))}, nil
}

// A panic inside a refresh (a bug in a library the read calls) must
// neither end the process (the read runs on its own goroutine, where no
// one up the stack could recover it) nor leave the refresh marked as
// running: under Lambda Managed Instances the process lives on, and no
// invocation of it would ever read the keys again. It is a failed read:
// the keys held stay in use, and the next read comes after the backoff.
func TestAPanicInARefreshDoesNotStopLaterRefreshes(t *testing.T) {
	api := &panickyAPI{panics: map[int64]bool{4: true}}
	api.value.Store(base64.StdEncoding.EncodeToString([]byte("first key, 32 bytes long, okay.")))
	var mu sync.Mutex
	clock := time.Unix(1_800_000_000, 0)
	src := New(api, "webhook", time.Minute, slog.New(slog.DiscardHandler))
	src.cache.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	advance(2 * time.Minute)
	keys, err := src.Keys(context.Background())
	if err != nil || len(keys) != 1 || string(keys[0]) != "first key, 32 bytes long, okay." {
		t.Fatalf("keys during the panicking refresh: %q, %v; want the first key", keys, err)
	}
	if got := src.TakeCounts(); got.RefreshFailed != 1 {
		t.Errorf("counts %+v; want the panic counted as one failed refresh", got)
	}
	api.value.Store(base64.StdEncoding.EncodeToString([]byte("second key, 32 bytes long, yes.")))
	// After the failed refresh's backoff, the next call reads again.
	advance(failedBackoffMax + time.Second)
	keys, err = src.Keys(context.Background())
	if err != nil || len(keys) != 1 || string(keys[0]) != "second key, 32 bytes long, yes." {
		t.Fatalf("keys after the panic and the backoff: %q, %v (%d calls); want the second key, read again", keys, err, api.calls.Load())
	}
}

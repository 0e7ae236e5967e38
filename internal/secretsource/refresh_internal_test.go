package secretsource

import (
	"context"
	"encoding/base64"
	"log/slog"
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
	value  string
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
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(p.value)}, nil
}

// A panic inside a refresh (recovered further up, as the engine recovers a
// panicking action) must not leave the refresh marked as running: under
// Lambda Managed Instances the process lives on, and no invocation of it
// would ever read the keys again.
func TestAPanicInARefreshDoesNotStopLaterRefreshes(t *testing.T) {
	api := &panickyAPI{value: base64.StdEncoding.EncodeToString([]byte("first key, 32 bytes long, okay.")), panics: map[int64]bool{4: true}}
	clock := time.Unix(1_800_000_000, 0)
	src := New(api, "webhook", time.Minute, slog.New(slog.DiscardHandler))
	src.cache.now = func() time.Time { return clock }
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Minute)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the refresh did not panic; the test's API is wrong")
			}
		}()
		_, _ = src.Keys(context.Background())
	}()
	api.value = base64.StdEncoding.EncodeToString([]byte("second key, 32 bytes long, yes."))
	// After the failed refresh's pause, the next call reads again.
	clock = clock.Add(retryFailedRefresh + time.Second)
	keys, err := src.Keys(context.Background())
	if err != nil || len(keys) != 1 || string(keys[0]) != "second key, 32 bytes long, yes." {
		t.Fatalf("keys after the panic and the pause: %q, %v (%d calls); want the second key, read again", keys, err, api.calls.Load())
	}
}

package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
)

// keys is a notify.Signer whose keys a test rotates.
type keys struct {
	mu      sync.Mutex
	current [][]byte
	next    [][]byte // what Recheck finds, if set
	reloads atomic.Int64
}

func (k *keys) Keys(context.Context) ([][]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current, nil
}

func (k *keys) Reads() uint64 { return uint64(k.reloads.Load()) }

// Recheck re-reads at once (every mark is older than the read it makes).
func (k *keys) Recheck(context.Context, uint64) ([][]byte, error) {
	k.reloads.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.next != nil {
		k.current, k.next = k.next, nil
	}
	return k.current, nil
}

var (
	oldKey = []byte("0123456789abcdefghijklmn")
	newKey = []byte("nmlkjihgfedcba9876543210")
)

// verifier is a receiver that checks signatures the way the specification
// says, computed here independently of package webhooksig.
func verifier(t *testing.T, accept []byte, calls *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		m := hmac.New(sha256.New, accept)
		m.Write([]byte(r.Header.Get("webhook-id") + "." + r.Header.Get("webhook-timestamp") + "."))
		m.Write(body)
		want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
		for _, sig := range strings.Split(r.Header.Get("webhook-signature"), " ") {
			if hmac.Equal([]byte(sig), []byte(want)) && r.Header.Get("webhook-id") == r.Header.Get("Idempotency-Key") {
				w.WriteHeader(204)
				return
			}
		}
		w.WriteHeader(401)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func signedEvent() action.Event {
	return action.Event{Key: "evt:signed-1:notify", Body: []byte(`{"id":"signed-1","action":"notify"}`)}
}

func TestSignedDeliveryVerifies(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, oldKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	n.Signer = &keys{current: [][]byte{oldKey}}
	if _, err := n.Do(context.Background(), signedEvent()); err != nil || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls; want a verified delivery", err, calls.Load())
	}
	// During a rotation both keys sign: a receiver with either verifies.
	n.Signer = &keys{current: [][]byte{newKey, oldKey}}
	if _, err := n.Do(context.Background(), signedEvent()); err != nil {
		t.Errorf("signed with two keys, verified with the old one: %v", err)
	}
}

// A receiver that refuses the signature after a rotation gets one more
// try with the re-read keys, in the same call.
func TestRefusedSignatureRetriesOnceWithARotatedSecret(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, newKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	k := &keys{current: [][]byte{oldKey}, next: [][]byte{newKey}}
	n.Signer = k
	if _, err := n.Do(context.Background(), signedEvent()); err != nil || calls.Load() != 2 || k.reloads.Load() != 1 {
		t.Fatalf("got %v after %d calls, %d reloads; want success on the second try", err, calls.Load(), k.reloads.Load())
	}
}

// Without a change, a 401 stays what it is: a permanent failure, one call.
func TestRefusedSignatureWithoutRotationIsPermanent(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, newKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	n.Signer = &keys{current: [][]byte{oldKey}}
	_, err := n.Do(context.Background(), signedEvent())
	if idem.Classify(err) != idem.ClassPermanent || calls.Load() != 1 {
		t.Fatalf("got %v (%v) after %d calls; want a permanent HTTP_401 after one call", err, idem.Classify(err), calls.Load())
	}
	for _, k := range [][]byte{oldKey, newKey} {
		if strings.Contains(err.Error(), string(k)) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(k)) {
			t.Errorf("the error %q holds a key", err)
		}
	}
}

func TestUnsignedWhenSigningIsOff(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	if _, err := notify.New(srv.URL, time.Second, notify.Classifier{}).Do(context.Background(), signedEvent()); err != nil {
		t.Fatal(err)
	}
	if got.Get("webhook-signature") != "" || got.Get("Idempotency-Key") != "evt:signed-1:notify" {
		t.Errorf("headers %v; want Idempotency-Key and no signature", got)
	}
}

// Two deliveries signed with the old key are refused at once; the first
// re-reads and finds the rotated key. The second's re-read finds nothing
// new, but its own signature was made with the old key: it must try again
// too, not store a permanent 401.
func TestConcurrentDeliveriesSignedBeforeARotationBothRetry(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, newKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	// Both requests are signed before either re-reads: the first two calls
	// of Keys wait for each other.
	n.Signer = &barrierKeys{keys: keys{current: [][]byte{oldKey}, next: [][]byte{newKey}}, arrived: make(chan struct{}, 2), both: make(chan struct{})}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	start := make(chan struct{})
	for i := range 2 {
		wg.Go(func() {
			<-start
			_, errs[i] = n.Do(context.Background(), action.Event{Key: "evt:signed-" + string(rune('a'+i)) + ":notify", Body: []byte(`{}`)})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("delivery %d: %v; want success after the rotation", i, err)
		}
	}
}

// A webhook URL often is a credential (a token in its path or query, a
// password): no error the action returns may contain it, since errors are
// stored, logged and returned to API callers.
func TestErrorsNeverHoldTheDownstreamURL(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens: the connection is refused
	url := "http://hook:pa55word@" + addr + "/services/T000/B000/XXXXSECRETXXXX?token=tok3n"
	_, err = notify.New(url, time.Second, notify.Classifier{}).Do(context.Background(), signedEvent())
	if err == nil {
		t.Fatal("no error from an unreachable downstream")
	}
	for _, secret := range []string{"pa55word", "XXXXSECRETXXXX", "tok3n", "hook:"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error %q holds %q from the URL", err, secret)
		}
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("the error %q does not name the host", err)
	}
}

// barrierKeys holds its first two Keys calls until both have arrived.
type barrierKeys struct {
	keys
	n       atomic.Int64
	arrived chan struct{}
	both    chan struct{}
	once    sync.Once
}

func (b *barrierKeys) Keys(ctx context.Context) ([][]byte, error) {
	if b.n.Add(1) <= 2 {
		b.arrived <- struct{}{}
		if len(b.arrived) == 2 {
			b.once.Do(func() { close(b.both) })
		}
		<-b.both
	}
	return b.keys.Keys(ctx)
}

// slowKeys re-reads its keys like secretsource.Source when Secrets Manager
// is slower than the ctx it is given: the re-read waits out the ctx, fails,
// and the keys read before (old) stay in use, with no error. Given room
// (no deadline within limit of now), the re-read finds the rotated keys.
type slowKeys struct {
	old, rotated [][]byte
	limit        time.Duration
}

func (s *slowKeys) Keys(ctx context.Context) ([][]byte, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.limit {
		<-ctx.Done()
		return s.old, nil
	}
	return s.rotated, nil
}

func (s *slowKeys) Reads() uint64 { return 0 }

func (s *slowKeys) Recheck(context.Context, uint64) ([][]byte, error) { return s.rotated, nil }

// The keys' re-read is not part of the request: a Secrets Manager slower
// than NOTIFY_TIMEOUT must cost neither the POST its time (the attempt
// failed with "context deadline exceeded") nor the re-read its result (the
// delivery went out with the keys from before the rotation: the e2e
// rotation test saw both under load).
func TestSlowKeyReadDoesNotEatTheRequestTimeout(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, newKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	n.Signer = &slowKeys{old: [][]byte{oldKey}, rotated: [][]byte{newKey, oldKey}, limit: time.Second}
	if _, err := n.Do(context.Background(), signedEvent()); err != nil || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls; want one delivery, signed with the re-read keys", err, calls.Load())
	}
}

// failingReload is a Signer whose re-read fails: Secrets Manager slow or
// down when a receiver refuses the signature.
type failingReload struct{ keys }

func (f *failingReload) Recheck(context.Context, uint64) ([][]byte, error) {
	f.reloads.Add(1)
	return nil, errors.New("GetSecretValue: context deadline exceeded")
}

// A refusal whose re-read fails may be a rotation not seen yet: it is
// transient (the delivery comes again), never a permanent failure.
func TestRefusedSignatureWithAFailedReReadIsTransient(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, newKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	k := &failingReload{keys: keys{current: [][]byte{oldKey}}}
	n.Signer = k
	_, err := n.Do(context.Background(), signedEvent())
	if idem.Classify(err) != idem.ClassTransient || calls.Load() != 1 || k.reloads.Load() != 1 {
		t.Fatalf("got %v (%v) after %d calls, %d re-reads; want a transient error after one call and one re-read", err, idem.Classify(err), calls.Load(), k.reloads.Load())
	}
}

// deadlineKeys records the deadline of the ctx Keys is given.
type deadlineKeys struct {
	keys
	got time.Time
}

func (d *deadlineKeys) Keys(ctx context.Context) ([][]byte, error) {
	d.got, _ = ctx.Deadline()
	return d.keys.Keys(ctx)
}

// The wait for the keys' re-read never takes the request's own time: it
// ends NOTIFY_TIMEOUT before the action's deadline, so that a hanging
// Secrets Manager cannot cut the POST short (Keys then returns the keys
// held).
func TestKeyWaitLeavesTheRequestItsTimeout(t *testing.T) {
	var calls atomic.Int64
	srv := verifier(t, oldKey, &calls)
	n := notify.New(srv.URL, time.Second, notify.Classifier{})
	k := &deadlineKeys{keys: keys{current: [][]byte{oldKey}}}
	n.Signer = k
	deadline := time.Now().Add(time.Minute)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if _, err := n.Do(ctx, signedEvent()); err != nil || calls.Load() != 1 {
		t.Fatalf("got %v after %d calls; want one delivery", err, calls.Load())
	}
	if want := deadline.Add(-time.Second); k.got.IsZero() || k.got.After(want) {
		t.Errorf("Keys' deadline %v; want at most %v (the action's deadline less the request timeout)", k.got, want)
	}
}

package secretsource_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

func newSecretValue() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// newSecret creates a secret on moto's Secrets Manager.
func newSecret(t *testing.T, client *secretsmanager.Client, value string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	out, err := client.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String("webhook-" + hex.EncodeToString(b[:])), SecretString: aws.String(value)})
	if err != nil {
		t.Fatal(err)
	}
	return *out.ARN
}

func TestRotationOnMoto(t *testing.T) {
	client := secretsmanager.NewFromConfig(ddblocal.Config(ddblocal.MotoEndpoint(t), nil))
	ctx := context.Background()
	first, second := newSecretValue(), newSecretValue()
	arn := newSecret(t, client, first)
	src := secretsource.New(client, arn, time.Hour, nil)
	if _, err := src.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := src.Keys(ctx)
	if err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != first {
		t.Fatalf("keys %d, %v; want the current one", len(keys), err)
	}
	// A rotation starts: the new version is AWSPENDING. Both are live.
	out, err := client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: aws.String("whsec_" + second), VersionStages: []string{"AWSPENDING"}})
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := src.Keys(ctx); len(keys) != 1 {
		t.Errorf("keys re-read before the refresh interval: %d", len(keys))
	}
	changed, err := src.Reload(ctx)
	if keys, _ = src.Keys(ctx); err != nil || !changed || len(keys) != 2 || base64.StdEncoding.EncodeToString(keys[1]) != second {
		t.Fatalf("after AWSPENDING: changed %v, %d keys, %v; want both keys, current first", changed, len(keys), err)
	}
	if changed, _ := src.Reload(ctx); changed {
		t.Errorf("a re-read without a change reported one")
	}
	// The rotation ends: the new version becomes AWSCURRENT.
	current, err := client.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: &arn})
	if err != nil {
		t.Fatal(err)
	}
	var oldID string
	for id, stages := range current.VersionIdsToStages {
		for _, s := range stages {
			if s == "AWSCURRENT" {
				oldID = id
			}
		}
	}
	for _, step := range []*secretsmanager.UpdateSecretVersionStageInput{
		{SecretId: &arn, VersionStage: aws.String("AWSCURRENT"), MoveToVersionId: out.VersionId, RemoveFromVersionId: &oldID},
		{SecretId: &arn, VersionStage: aws.String("AWSPENDING"), RemoveFromVersionId: out.VersionId},
	} {
		if _, err := client.UpdateSecretVersionStage(ctx, step); err != nil {
			t.Fatal(err)
		}
	}
	// Secrets Manager moved AWSPREVIOUS to the old version: receivers that
	// hold only the old secret still verify, until the label is removed.
	if changed, err := src.Reload(ctx); err != nil || !changed {
		t.Fatalf("after promotion: changed %v, %v", changed, err)
	}
	if keys, _ = src.Keys(ctx); len(keys) != 2 || base64.StdEncoding.EncodeToString(keys[0]) != second || base64.StdEncoding.EncodeToString(keys[1]) != first {
		t.Fatalf("after promotion: %d keys; want the new current one, then the previous one", len(keys))
	}
	if _, err := client.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: &arn, VersionStage: aws.String("AWSPREVIOUS"), RemoveFromVersionId: &oldID}); err != nil {
		t.Fatal(err)
	}
	if changed, err := src.Reload(ctx); err != nil || !changed {
		t.Fatalf("after removing AWSPREVIOUS: changed %v, %v", changed, err)
	}
	if keys, _ = src.Keys(ctx); len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != second {
		t.Errorf("after removing AWSPREVIOUS: %d keys; want only the new current one", len(keys))
	}
}

// A pending or previous version that is not a valid key (the 18-byte
// pending key that failed every cold start) is ignored, with a warning and
// a count, at init and at every re-read; the valid keys sign on.
func TestInvalidVersionsAreIgnoredWithAWarning(t *testing.T) {
	client := secretsmanager.NewFromConfig(ddblocal.Config(ddblocal.MotoEndpoint(t), nil))
	ctx := context.Background()
	current := newSecretValue()
	arn := newSecret(t, client, current)
	short := base64.StdEncoding.EncodeToString(make([]byte, 18))
	if _, err := client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: &short, VersionStages: []string{"AWSPENDING"}}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	src := secretsource.New(client, arn, time.Hour, slog.New(slog.NewTextHandler(&log, nil)))
	if _, err := src.Reload(ctx); err != nil {
		t.Fatalf("Reload with an invalid pending version: %v; want no init failure", err)
	}
	keys, err := src.Keys(ctx)
	if err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != current {
		t.Fatalf("keys %d, %v; want the current one only", len(keys), err)
	}
	if got := src.TakeCounts(); got != (secretsource.Counts{Ignored: 1}) {
		t.Errorf("counts %+v; want one ignored version", got)
	}
	if l := log.String(); !strings.Contains(l, "signing secret version ignored") || !strings.Contains(l, "stage=AWSPENDING") || strings.Contains(l, short) {
		t.Errorf("log %q; want a warning naming the stage, never the value", l)
	}
	// The same holds for an invalid AWSCURRENT once keys are read: put
	// straight to AWSCURRENT, the invalid value moves the valid one to
	// AWSPREVIOUS, and the keys read before stay in use.
	if _, err := client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: aws.String("not a key!")}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Reload(ctx); err == nil {
		t.Errorf("Reload with an invalid AWSCURRENT: no error; want one")
	}
	if keys, err := src.Keys(ctx); err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != current {
		t.Errorf("keys after an invalid AWSCURRENT: %d, %v; want the ones read before", len(keys), err)
	}
	if got := src.TakeCounts(); got.RefreshFailed != 1 {
		t.Errorf("counts %+v; want one failed refresh", got)
	}
}

func TestFailuresNameTheSecretNeverItsValue(t *testing.T) {
	client := secretsmanager.NewFromConfig(ddblocal.Config(ddblocal.MotoEndpoint(t), nil))
	ctx := context.Background()
	missing := secretsource.New(client, "no-such-webhook-secret", 0, nil)
	if _, err := missing.Reload(ctx); idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "no-such-webhook-secret") {
		t.Errorf("missing secret: %v (%v); want a permanent error naming it", err, idem.Classify(err))
	}
	bad := "this is not base64 but a password!"
	arn := newSecret(t, client, bad)
	_, err := secretsource.New(client, arn, 0, nil).Reload(ctx)
	if idem.Classify(err) != idem.ClassPermanent || strings.Contains(err.Error(), "password") || !strings.Contains(err.Error(), arn) {
		t.Errorf("a value that is not a key: %v; want a permanent error naming the secret, without its value", err)
	}
	unreachable := secretsource.New(secretsmanager.NewFromConfig(ddblocal.Config("http://127.0.0.1:1", nil), func(o *secretsmanager.Options) { o.RetryMaxAttempts = 1 }), arn, 0, nil)
	if _, err := unreachable.Reload(ctx); idem.Classify(err) != idem.ClassTransient {
		t.Errorf("unreachable Secrets Manager: %v; want transient", err)
	}
}

// Once loaded, an outage of Secrets Manager keeps the keys it had.
func TestStaleKeysSurviveAFailedRefresh(t *testing.T) {
	ep := ddblocal.MotoEndpoint(t)
	client := secretsmanager.NewFromConfig(ddblocal.Config(ep, nil))
	arn := newSecret(t, client, newSecretValue())
	var log bytes.Buffer
	src := secretsource.New(client, arn, time.Nanosecond, slog.New(slog.NewTextHandler(&log, nil)))
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: &arn, ForceDeleteWithoutRecovery: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if keys, err := src.Keys(context.Background()); err != nil || len(keys) != 1 {
		t.Errorf("keys after a failed refresh: %d, %v; want the last good key", len(keys), err)
	}
	// The failure is logged and counted (once per failed re-read), not silent.
	if got := src.TakeCounts(); got != (secretsource.Counts{RefreshFailed: 1}) {
		t.Errorf("counts %+v; want one failed refresh", got)
	}
	if !strings.Contains(log.String(), "signing secret not re-read") || !strings.Contains(log.String(), arn) {
		t.Errorf("log %q; want a warning naming the secret", log.String())
	}
	// It says how long the read ran and when the next comes: a "deadline
	// exceeded" alone does not say whose deadline ended it.
	if !regexp.MustCompile(`took_ms=\d+ retry_in=1s`).MatchString(log.String()) {
		t.Errorf("log %q; want took_ms and retry_in=1s (a failed read is tried again within seconds)", log.String())
	}
	if got := src.TakeCounts(); got != (secretsource.Counts{}) {
		t.Errorf("counts taken twice: %+v; want zero the second time", got)
	}
}

// hangingAPI answers the first GetSecretValue calls and then hangs until
// the caller gives up, as an unreachable endpoint does.
type hangingAPI struct {
	value   string
	answers atomic.Int64
	calls   atomic.Int64
}

func (h *hangingAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	h.calls.Add(1)
	if h.answers.Add(-1) >= 0 {
		if aws.ToString(in.VersionStage) != "AWSCURRENT" {
			return nil, &types.ResourceNotFoundException{Message: aws.String("no pending version")}
		}
		return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(h.value)}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A hanging Secrets Manager never stops deliveries: the callers share one
// re-read (its three stages at once), which gives up after its own
// timeout; every caller then goes on with the keys it has, and the failed
// re-read is not tried again on every delivery, but after a backoff.
func TestAHangingRefreshDoesNotStopDeliveries(t *testing.T) {
	api := &hangingAPI{value: newSecretValue()}
	api.answers.Store(3) // Reload: AWSCURRENT, AWSPENDING and AWSPREVIOUS
	src := secretsource.New(api, "webhook", time.Nanosecond, slog.New(slog.DiscardHandler))
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			keys, err := src.Keys(context.Background())
			if err == nil && len(keys) != 1 {
				err = fmt.Errorf("%d keys", len(keys))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Keys during a hang: %v; want the keys already read", err)
		}
	}
	if n := api.calls.Load(); n != 6 {
		t.Errorf("%d GetSecretValue calls; want 6 (Reload's three, then one re-read of three for all callers)", n)
	}
	if _, err := src.Keys(context.Background()); err != nil || api.calls.Load() != 6 {
		t.Errorf("after a failed re-read: %v, %d calls; want the keys, and no new call before the backoff", err, api.calls.Load())
	}
}

// rotatingAPI serves one value as AWSCURRENT (no other stage), which the
// test changes as a rotation would; an armed call reads the value, says so
// on entered, and waits for hold before it answers.
type rotatingAPI struct {
	mu      sync.Mutex
	value   string
	armed   bool
	entered chan struct{}
	hold    chan struct{}
}

func (r *rotatingAPI) set(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.value = v
}

func (r *rotatingAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if aws.ToString(in.VersionStage) != "AWSCURRENT" {
		return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
	}
	r.mu.Lock()
	v, wait := r.value, r.armed
	r.armed = false
	r.mu.Unlock()
	if wait {
		close(r.entered)
		<-r.hold
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

// A Reload asked while a read is in flight (under Lambda Managed
// Instances, two invocations of one process) that began before a rotation
// must not be answered by that read: it waits for it, then reads again,
// and the keys held at the end are the rotated ones, never the older
// read's, which finished later than the rotation.
func TestAReloadDuringAnOlderReadReadsAgain(t *testing.T) {
	before, after := newSecretValue(), newSecretValue()
	api := &rotatingAPI{value: before, entered: make(chan struct{}), hold: make(chan struct{})}
	src := secretsource.New(api, "webhook", time.Hour, nil)
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	api.armed = true
	api.mu.Unlock()
	slow := make(chan error)
	go func() {
		_, err := src.Reload(context.Background())
		slow <- err
	}()
	<-api.entered // the slow read has the old value
	api.set(after)
	later := make(chan error)
	go func() {
		changed, err := src.Reload(context.Background())
		if err == nil && !changed {
			err = fmt.Errorf("the later Reload reported no change")
		}
		later <- err
	}()
	close(api.hold)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatalf("the later Reload: %v; want the new key", err)
	}
	keys, err := src.Keys(context.Background())
	if err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != after {
		t.Fatalf("keys after both reads: %d keys, %v; want only the new one", len(keys), err)
	}
}

// A Reload waiting for an older read in flight waits within its own ctx:
// when ctx ends first, it returns ctx's error at once and starts no read;
// the older read goes on for the callers that still want it.
func TestAReloadWaitingForAnOlderReadEndsWithItsContext(t *testing.T) {
	api := &rotatingAPI{value: newSecretValue(), entered: make(chan struct{}), hold: make(chan struct{})}
	src := secretsource.New(api, "webhook", time.Hour, nil)
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	api.armed = true
	api.mu.Unlock()
	slow := make(chan error)
	go func() {
		_, err := src.Reload(context.Background())
		slow <- err
	}()
	<-api.entered // the older read is in flight, held
	reads := src.Reads()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	waiting := make(chan error)
	go func() {
		_, err := src.Reload(ctx)
		waiting <- err
	}()
	select {
	case err := <-waiting:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the Reload whose ctx ended: %v; want %v", err, context.Canceled)
		}
	case <-time.After(10 * time.Second):
		close(api.hold)
		t.Fatal("the Reload whose ctx ended still waits for the older read 10 s later")
	}
	if n := src.Reads(); n != reads {
		t.Errorf("reads begun %d; want %d: a Reload whose ctx ended starts none", n, reads)
	}
	close(api.hold)
	if err := <-slow; err != nil {
		t.Fatalf("the older read's Reload: %v", err)
	}
}

// parseWords is a Document parser for the tests: a value of words, or an
// error that does not quote it.
func parseWords(s string) ([]string, error) {
	if strings.HasPrefix(s, "bad") {
		return nil, fmt.Errorf("a value of %d bytes that starts badly", len(s))
	}
	return strings.Fields(s), nil
}

// A Document reads its secret at Load, picks up a new value after the
// refresh interval, and keeps the last good value when the new one does
// not parse (saying so through OnRefreshError, never quoting the value).
func TestDocumentRefreshesAndKeepsTheLastGoodValue(t *testing.T) {
	client := secretsmanager.NewFromConfig(ddblocal.Config(ddblocal.MotoEndpoint(t), nil))
	ctx := context.Background()
	arn := newSecret(t, client, "alpha beta")
	doc := secretsource.NewDocument(client, arn, time.Nanosecond, parseWords)
	var failures []error
	var mu sync.Mutex
	doc.OnRefreshError(func(err error) { mu.Lock(); failures = append(failures, err); mu.Unlock() })
	if err := doc.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := doc.Get(ctx); err != nil || strings.Join(got, ",") != "alpha,beta" {
		t.Fatalf("Get after Load: %q, %v; want alpha,beta", got, err)
	}
	if _, err := client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: aws.String("gamma")}); err != nil {
		t.Fatal(err)
	}
	if got, err := doc.Get(ctx); err != nil || strings.Join(got, ",") != "gamma" {
		t.Fatalf("Get after a new value: %q, %v; want gamma (refresh 1 ns)", got, err)
	}
	if _, err := client.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: aws.String("bad secret-value-123")}); err != nil {
		t.Fatal(err)
	}
	if got, err := doc.Get(ctx); err != nil || strings.Join(got, ",") != "gamma" {
		t.Fatalf("Get after a value that does not parse: %q, %v; want the last good value, gamma", got, err)
	}
	if c := doc.TakeCounts(); c.RefreshFailed != 1 || doc.TakeCounts().RefreshFailed != 0 {
		t.Errorf("counts %+v; want one failed re-read, counted once", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), arn) || strings.Contains(failures[0].Error(), "secret-value-123") ||
		idem.Classify(failures[0]) != idem.ClassPermanent {
		t.Errorf("refresh failures %v; want one permanent error naming the secret, not its value", failures)
	}
}

func TestDocumentLoadFailures(t *testing.T) {
	client := secretsmanager.NewFromConfig(ddblocal.Config(ddblocal.MotoEndpoint(t), nil))
	ctx := context.Background()
	if err := secretsource.NewDocument(client, "no-such-document", 0, parseWords).Load(ctx); idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "no-such-document") {
		t.Errorf("missing secret: %v; want a permanent error naming it", err)
	}
	arn := newSecret(t, client, "bad hunter2-hunter2")
	doc := secretsource.NewDocument(client, arn, 0, parseWords)
	err := doc.Load(ctx)
	if idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), arn) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a value that does not parse: %v; want a permanent error naming the secret, not the value", err)
	}
	if _, err := doc.Get(ctx); err == nil {
		t.Error("Get after a failed Load: want the read's error, not a zero value")
	}
}

// slowAPI serves one AWSCURRENT value (no other stage), which the test
// rotates; its calls take delay, and it records whether a call was cut
// short by its context.
type slowAPI struct {
	mu    sync.Mutex
	value string
	delay time.Duration
	cut   atomic.Int64
	done  chan struct{} // gets one value per AWSCURRENT call that answered
}

func (s *slowAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if aws.ToString(in.VersionStage) != secretsource.StageCurrent {
		return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
	}
	s.mu.Lock()
	v, delay := s.value, s.delay
	s.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		s.cut.Add(1)
		return nil, ctx.Err()
	}
	s.done <- struct{}{}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

// A refresh started by an invocation with 300 ms left runs with its own
// timeout, not that invocation's remaining time: it completes (Secrets
// Manager answering in 800 ms) and its keys are used by the next caller,
// instead of failing at the invocation's deadline and pinning the old keys
// for the whole process.
func TestARefreshOutlivesTheInvocationThatStartedIt(t *testing.T) {
	before, after := newSecretValue(), newSecretValue()
	api := &slowAPI{value: before, done: make(chan struct{}, 4)}
	src := secretsource.New(api, "webhook", 50*time.Millisecond, slog.New(slog.DiscardHandler))
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-api.done
	api.mu.Lock()
	api.value, api.delay = after, 800*time.Millisecond
	api.mu.Unlock()
	time.Sleep(60 * time.Millisecond) // the keys are now stale
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if keys, err := src.Keys(ctx); err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != before {
		t.Fatalf("keys for the invocation with 300 ms left: %d, %v; want the keys held (the refresh is not done)", len(keys), err)
	}
	select {
	case <-api.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the refresh never answered (%d calls cut short by their context)", api.cut.Load())
	}
	if n := api.cut.Load(); n != 0 {
		t.Fatalf("%d calls cut short; want the refresh to run with its own timeout", n)
	}
	api.mu.Lock()
	api.delay = 0
	api.mu.Unlock()
	keys, err := src.Keys(context.Background())
	if err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != after {
		t.Fatalf("keys after the refresh: %d, %v; want the refreshed one", len(keys), err)
	}
}

// stagedAPI answers each stage from its map: a string, binary data
// (bin), or no such version; while down it fails every call as a
// brownout does (HTTP 503), counting the calls.
type stagedAPI struct {
	mu     sync.Mutex
	values map[string]string
	bin    map[string]bool
	down   bool
	calls  atomic.Int64
	hold   chan struct{} // if set, calls wait for it
}

func (s *stagedAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	s.calls.Add(1)
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stage := aws.ToString(in.VersionStage)
	switch {
	case s.down:
		return nil, &smithy.GenericAPIError{Code: "ServiceUnavailable", Message: "injected", Fault: smithy.FaultServer}
	case s.bin[stage]:
		return &secretsmanager.GetSecretValueOutput{SecretBinary: []byte{0, 1, 2}}, nil
	case s.values[stage] != "":
		return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(s.values[stage])}, nil
	}
	return nil, &types.ResourceNotFoundException{Message: aws.String("no such version")}
}

// A binary AWSPENDING or AWSPREVIOUS version is not a key: it is ignored
// with a warning, like any invalid version, never an init failure. A
// binary AWSCURRENT still is one.
func TestABinaryPendingVersionIsIgnored(t *testing.T) {
	current := newSecretValue()
	api := &stagedAPI{values: map[string]string{secretsource.StageCurrent: current}, bin: map[string]bool{secretsource.StagePending: true, secretsource.StagePrevious: true}}
	var log bytes.Buffer
	src := secretsource.New(api, "webhook", time.Hour, slog.New(slog.NewTextHandler(&log, nil)))
	if _, err := src.Reload(context.Background()); err != nil {
		t.Fatalf("Reload with binary pending and previous versions: %v; want no error", err)
	}
	if keys, err := src.Keys(context.Background()); err != nil || len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != current {
		t.Fatalf("keys %d, %v; want the current one only", len(keys), err)
	}
	if got := src.TakeCounts(); got.Ignored != 2 || !strings.Contains(log.String(), "stage=AWSPENDING") || !strings.Contains(log.String(), "stage=AWSPREVIOUS") {
		t.Errorf("counts %+v, log %q; want both versions ignored, with a warning each", got, log.String())
	}
	api.mu.Lock()
	api.bin[secretsource.StageCurrent] = true
	api.mu.Unlock()
	if _, err := secretsource.New(api, "webhook", time.Hour, nil).Reload(context.Background()); idem.Classify(err) != idem.ClassPermanent || !strings.Contains(err.Error(), "binary") {
		t.Errorf("a binary AWSCURRENT: %v; want a permanent error", err)
	}
}

// Secrets Manager down at the cold start: the first read fails transient
// (the init goes on), and so does every Keys until a read succeeds, each
// error transient (the delivery goes back), never permanent. Concurrent
// callers share one read; once Secrets Manager is back, the keys come.
func TestKeysUnreadAtInitAreTransientUntilARead(t *testing.T) {
	current := newSecretValue()
	api := &stagedAPI{values: map[string]string{secretsource.StageCurrent: current}, down: true}
	src := secretsource.New(api, "webhook", time.Hour, slog.New(slog.DiscardHandler))
	if _, err := src.Reload(context.Background()); idem.Classify(err) != idem.ClassTransient {
		t.Fatalf("Reload while Secrets Manager is down: %v (%v); want transient", err, idem.Classify(err))
	}
	if _, err := src.Keys(context.Background()); err == nil || idem.Classify(err) != idem.ClassTransient {
		t.Fatalf("Keys before any read: %v (%v); want transient", err, idem.Classify(err))
	}
	api.mu.Lock()
	api.down = false
	api.mu.Unlock()
	// Wait out the failed reads' backoff (at most 8 s) without reading in
	// a tight loop: each Keys inside it answers at once, from the backoff.
	var keys [][]byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if keys, err = src.Keys(context.Background()); err == nil {
			break
		}
		if idem.Classify(err) != idem.ClassTransient {
			t.Fatalf("Keys before the keys are read: %v; want transient", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no keys 30 s after Secrets Manager came back: %v", err)
		}
	}
	if len(keys) != 1 || base64.StdEncoding.EncodeToString(keys[0]) != current {
		t.Fatalf("keys %d; want the current one", len(keys))
	}

	// Concurrent first callers share one read (three stages).
	api2 := &stagedAPI{values: map[string]string{secretsource.StageCurrent: current}, hold: make(chan struct{})}
	src2 := secretsource.New(api2, "webhook", time.Hour, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = src2.Keys(context.Background()) })
	}
	for api2.calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	close(api2.hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v; want the keys", i, err)
		}
	}
	if n := api2.calls.Load(); n != 3 {
		t.Errorf("%d GetSecretValue calls for 8 first callers; want 3 (one read)", n)
	}
}

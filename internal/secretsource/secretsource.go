// Package secretsource reads the webhook signing secret from AWS Secrets
// Manager and keeps it fresh, so that a rotation needs no redeploy, reads
// plain-text secrets (the downstream URL) once, and keeps a parsed secret
// document fresh ([Document]: the inbound webhook sources) by the same
// refresh rule.
//
// A rotation cannot break deliveries. Every version that is labelled is
// live: AWSCURRENT, AWSPENDING (a rotation under way: receivers may already
// hold it) and AWSPREVIOUS (the one before: receivers may still hold only
// it), and deliveries are signed with each, until the procedure's last step
// removes the AWSPREVIOUS label. A pending or previous version that is not
// a valid key (binary, or not a key) is ignored, with a warning and a count
// (never an init failure); only AWSCURRENT must be valid. Once read, the
// keys stay in use through any failed re-read, which is logged and counted.
//
// Secrets Manager cannot be hammered or starve the keys: a process reads a
// secret once at a time (the read in flight is shared by every invocation
// that wants it, each waiting within its own context), each read with its
// own timeout, detached from the invocation that started it; a failed read
// is tried again after 1 s, 2 s, 4 s, then every 8 s; a refused signature
// makes at most one read per 5 s (Source.Recheck). Until a first read
// succeeds (a brownout at the cold start), Keys and Get return a transient
// error: deliveries go back to be retried, nothing is acknowledged.
//
// It is a driver: it classifies errors and never retries (the SDK does),
// and no error, log line or value it returns ever holds the secret.
package secretsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/awserr"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/webhooksig"
)

// DefaultRefresh is how old the keys may get before they are read again.
const DefaultRefresh = 5 * time.Minute

// RequiredIAMActions are exactly the IAM actions the source calls, on the
// one secret (the template grants these; a test keeps them in step).
func RequiredIAMActions() []string { return []string{"secretsmanager:GetSecretValue"} }

// API is the part of *secretsmanager.Client the source uses.
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// The version stages whose keys are live, in the order deliveries carry
// their signatures.
const (
	StageCurrent  = "AWSCURRENT"
	StagePending  = "AWSPENDING"
	StagePrevious = "AWSPREVIOUS"
)

var liveStages = []string{StageCurrent, StagePending, StagePrevious}

// Counts are what went wrong without stopping deliveries, since the last
// TakeCounts: versions ignored because they are not valid keys, and
// re-reads that failed (the keys already read stayed in use).
type Counts struct {
	Ignored       int
	RefreshFailed int
}

// Source holds the live keys of one secret. It is safe for concurrent use:
// the keys are behind the cache's mutex, the counts behind mu. Under Lambda
// Managed Instances one Source serves every invocation of the process: one
// read runs at a time, shared by every invocation that wants it (a stale
// key, a refused signature), and the keys held are always those of the
// read that began last among those that succeeded.
type Source struct {
	api   API
	id    string
	name  string // what the log lines call it: "signing secret" unless Named
	log   *slog.Logger
	cache cache[[][]byte]

	mu     sync.Mutex
	counts Counts
}

// New returns a Source for the secret id (a name or an ARN), re-read after
// refresh (zero means DefaultRefresh), warning on logger (nil: the default
// logger). Call Reload before use.
func New(api API, id string, refresh time.Duration, logger *slog.Logger) *Source {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Source{api: api, id: id, name: "signing secret", log: logger}
	s.cache = newCache(refresh, s.readKeys)
	s.cache.failed = func(ctx context.Context, err error, took, retryIn time.Duration, held bool) {
		s.mu.Lock()
		s.counts.RefreshFailed++
		s.mu.Unlock()
		msg := s.name + " not re-read; the keys read before stay in use"
		if !held {
			msg = s.name + " not read yet; deliveries go back to be retried until it is"
		}
		// How long the read ran and when the next one comes tell a slow
		// Secrets Manager (or a timeout: the read's own) from a refused read.
		s.log.WarnContext(ctx, msg, "secret", s.id, "error", err.Error(),
			"took_ms", took.Milliseconds(), "retry_in", retryIn.String())
	}
	return s
}

// Named sets what the log lines call the secret (the default is "signing
// secret"), and returns s. Call it before use.
func (s *Source) Named(name string) *Source {
	s.name = name
	return s
}

// TakeCounts returns the counts since the last call and starts them again
// (each problem is reported once, in one invocation's metrics).
func (s *Source) TakeCounts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	s.counts = Counts{}
	return c
}

// Keys returns the live keys, current first. When they are older than the
// refresh interval, they are read again: the read in flight is shared by
// every caller, each waiting for it within ctx (call Keys before a
// request's own timeout starts), and the read runs with its own timeout,
// not ctx's. A failed read keeps the keys read before, and is tried again
// after a capped backoff (1 s to 8 s). Until a first read succeeds, the
// error is transient (the delivery goes back to be retried).
func (s *Source) Keys(ctx context.Context) ([][]byte, error) { return s.cache.get(ctx) }

// Reads returns how many reads of the keys have begun so far: a mark for
// Recheck, taken when a request signed with the keys is sent.
func (s *Source) Reads() uint64 { return s.cache.readsBegun() }

// Recheck returns the keys read by a read that began after mark (a
// Reads value taken when the refused request was sent): a read that
// already succeeded, the one in flight, or a new one. Those are what a
// receiver's refusal can be judged by: if they are the keys the request
// was signed with, no rotation explains the refusal.
//
// A refused signature is the one trigger a receiver controls, so it gets
// at most one read per recheckInterval (5 s) in a process, shared by every
// refusal that can use it: a receiver refusing every signature costs at
// most three GetSecretValue calls per 5 s per process (0.6 per second, so
// a thousand environments stay far inside Secrets Manager's and KMS's
// request quotas), not three per delivery. A rotation is noticed by the
// next allowed read, at most 5 s later: the refusals meanwhile are
// transient and retried with the queue's backoff, which is longer.
//
// It is an error when no such read is available: the last recheck was less
// than the interval ago, the read in flight began before mark, or the read
// failed. The refusal is then transient: whether the keys rotated is
// unknown. The keys held are returned in every case.
func (s *Source) Recheck(ctx context.Context, mark uint64) ([][]byte, error) {
	return s.cache.recheck(ctx, mark)
}

// Reload reads the keys now (after the read in flight, if any) and reports
// whether the keys held now differ from those held when it was called.
// Call it at init (the first read), with the init's budget as ctx's
// deadline: its error says what is wrong (missing secret, missing
// permission, an AWSCURRENT value that is not a key) without the value;
// idem.Classify tells an outage (transient: the function can start, and
// Keys reads again) from a misconfiguration (permanent). An invalid
// pending or previous version is not an error: it is ignored, logged and
// counted. Deliveries use Keys and, after a refused signature, Recheck.
func (s *Source) Reload(ctx context.Context) (changed bool, err error) {
	prev, keys, err := s.cache.reload(ctx)
	if err != nil {
		return false, err
	}
	return !equalKeys(prev, keys), nil
}

// readKeys reads the live keys (the cache's read); an ignored version is
// counted and logged here, a failed re-read by the cache's failed hook.
func (s *Source) readKeys(ctx context.Context) ([][]byte, error) {
	keys, ignored, err := s.readLive(ctx)
	s.mu.Lock()
	s.counts.Ignored += len(ignored)
	s.mu.Unlock()
	// Logged outside the lock: deliveries wait on it.
	for _, ig := range ignored {
		s.log.WarnContext(ctx, s.name+" version ignored: it is not a valid key; only the valid versions are used",
			"secret", s.id, "stage", ig.stage, "error", ig.err.Error())
	}
	return keys, err
}

type ignoredVersion struct {
	stage string
	err   error
}

// readLive reads the key of every live stage: AWSCURRENT must be a valid
// key; a pending or previous version that is missing is not live, and one
// that is not a valid key is ignored (and reported).
func (s *Source) readLive(ctx context.Context) (keys [][]byte, ignored []ignoredVersion, err error) {
	// The stages are read at once: a read takes one call's time, not three.
	var found [3]struct {
		key []byte
		err error
	}
	var wg sync.WaitGroup
	for i, stage := range liveStages {
		wg.Go(func() {
			// A panic here would end the process (no one can recover it on
			// this goroutine): it fails the read instead.
			defer func() {
				if p := recover(); p != nil {
					found[i].err = idem.Transient(fmt.Errorf("reading secret %s (%s) panicked: %v", s.id, stage, p))
				}
			}()
			found[i].key, found[i].err = s.read(ctx, stage)
		})
	}
	wg.Wait()
	for i, stage := range liveStages {
		key, err := found[i].key, found[i].err
		switch {
		case err == nil:
			if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }) {
				keys = append(keys, key)
			}
		case stage != StageCurrent && isNotFound(err):
		case stage != StageCurrent && isInvalid(err):
			ignored = append(ignored, ignoredVersion{stage, err})
		default:
			return nil, ignored, err
		}
	}
	return keys, ignored, nil
}

// read returns the decoded key of one version stage.
func (s *Source) read(ctx context.Context, stage string) ([]byte, error) {
	value, err := readString(ctx, s.api, s.id, stage)
	if err != nil {
		return nil, err
	}
	key, err := webhooksig.DecodeSecret(value)
	if err != nil {
		return nil, invalid{idem.Permanent(fmt.Errorf("secret %s (%s): %w", s.id, stage, err))}
	}
	return key, nil
}

// ReadString reads the AWSCURRENT value of a plain-text secret (the
// downstream URL). Its errors name the secret, never the value.
func ReadString(ctx context.Context, api API, id string) (string, error) {
	return readString(ctx, api, id, StageCurrent)
}

func readString(ctx context.Context, api API, id, stage string) (string, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id), VersionStage: aws.String(stage)})
	if err != nil {
		return "", classify(id, stage, err)
	}
	if out.SecretString == nil {
		// Not a key: a binary pending or previous version is ignored.
		return "", invalid{idem.Permanent(fmt.Errorf("secret %s (%s) holds binary data; want a string", id, stage))}
	}
	return *out.SecretString, nil
}

type invalid struct{ error }

func (e invalid) Unwrap() error { return e.error }

func isInvalid(err error) bool {
	_, ok := errors.AsType[invalid](err)
	return ok
}

type notFound struct{ error }

func (e notFound) Unwrap() error { return e.error }

func isNotFound(err error) bool {
	_, ok := errors.AsType[notFound](err)
	return ok
}

// classify marks err with the class awserr gives it, naming the secret
// and, for a refusal, what is missing (its code checks only choose that
// sentence); it never repeats the SDK's message body, which could echo
// request content.
func classify(id, stage string, err error) error {
	switch awserr.Classify(err) {
	case idem.ClassPermanent:
		if _, ok := errors.AsType[*types.ResourceNotFoundException](err); ok {
			return notFound{idem.Permanent(fmt.Errorf("secret %s has no %s version (or does not exist)", id, stage))}
		}
		code := "refused"
		if api, ok := errors.AsType[smithy.APIError](err); ok {
			code = api.ErrorCode()
		}
		switch code {
		case "AccessDeniedException":
			return idem.Permanent(fmt.Errorf("reading secret %s denied: the function's role needs %s on it (%s)", id, RequiredIAMActions()[0], code))
		case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException":
			return idem.Permanent(fmt.Errorf("reading secret %s: the credentials were refused (%s): missing, invalid or expired", id, code))
		case "DecryptionFailure":
			return idem.Permanent(fmt.Errorf("secret %s cannot be decrypted: the role needs kms:Decrypt on its key (%s)", id, code))
		}
		return idem.Permanent(fmt.Errorf("secret %s: %s", id, code))
	case idem.ClassTransient:
		// A read: a call that got no reply is transient too.
		return idem.Transient(fmt.Errorf("reading secret %s: %w", id, err))
	}
	// Not an AWS error the translator knows: the engine's own rules judge it.
	return fmt.Errorf("reading secret %s: %w", id, err)
}

func equalKeys(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

// Package secretsource reads the webhook signing secret from AWS Secrets
// Manager and keeps it fresh, so that a rotation needs no redeploy. It reads
// the AWSCURRENT version and, during a rotation, the AWSPENDING one: both
// are live, and deliveries are signed with each (receivers verify with
// whichever they hold).
//
// It is a driver: it classifies errors and never retries (the SDK does),
// and no error, log line or value it returns ever holds the secret.
package secretsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/webhooksig"
)

// DefaultRefresh is how old the keys may get before they are read again.
const DefaultRefresh = 5 * time.Minute

const (
	// refreshTimeout bounds the re-read one delivery makes when the keys
	// are stale (within its own deadline too): a hanging Secrets Manager
	// must not hold deliveries.
	refreshTimeout = 2 * time.Second
	// retryFailedRefresh is how long after a failed re-read the next one is
	// tried; the keys already read stay in use meanwhile.
	retryFailedRefresh = 30 * time.Second
)

// RequiredIAMActions are exactly the IAM actions the source calls, on the
// one secret (the template grants these; a test keeps them in step).
func RequiredIAMActions() []string { return []string{"secretsmanager:GetSecretValue"} }

// API is the part of *secretsmanager.Client the source uses.
type API interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Source holds the live keys of one secret. It is safe for concurrent use:
// under Lambda Managed Instances one Source serves every invocation of the
// process, so reads may overlap (a periodic refresh, and a Reload after a
// refused signature); the keys held are always those of the read that began
// last among those that finished, never an older read that finished later.
type Source struct {
	api     API
	id      string
	refresh time.Duration
	now     func() time.Time

	mu         sync.Mutex
	keys       [][]byte
	readAt     time.Time
	refreshing bool
	// begun numbers the reads as they start; held is the number of the
	// read whose keys are held.
	begun, held uint64
}

// New returns a Source for the secret id (a name or an ARN), re-read after
// refresh (zero means DefaultRefresh). Call Load before use.
func New(api API, id string, refresh time.Duration) *Source {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return &Source{api: api, id: id, refresh: refresh, now: time.Now}
}

// Load reads the keys now. Use it at init: its error says what is wrong
// (missing secret, missing permission, a value that is not a key) without
// the value.
func (s *Source) Load(ctx context.Context) error {
	_, err := s.reload(ctx)
	return err
}

// Keys returns the live keys, current first. When they are older than the
// refresh interval, one caller reads them again, with a short timeout of its
// own, while every other caller goes on with the keys already read: an
// outage or a hang of Secrets Manager never stops deliveries. A failed
// re-read is tried again after 30 s.
func (s *Source) Keys(ctx context.Context) ([][]byte, error) {
	s.mu.Lock()
	keys, stale := s.keys, s.now().Sub(s.readAt) >= s.refresh
	refresh := stale && !s.refreshing && keys != nil
	if refresh {
		s.refreshing = true
	}
	s.mu.Unlock()
	if keys == nil {
		// Never read (Load was not called, or failed): read now.
		if _, err := s.reload(ctx); err != nil {
			return nil, err
		}
		return s.current(), nil
	}
	if refresh {
		s.refreshNow(ctx)
	}
	return s.current(), nil
}

// refreshNow re-reads the keys for Keys, which has marked the refresh as
// running.
func (s *Source) refreshNow(ctx context.Context) {
	err := errors.New("the refresh did not finish")
	defer func() {
		// Deferred, so that a panic in the read (recovered by the caller's
		// caller) cannot leave the mark set: every later Keys call in the
		// process would skip the refresh forever.
		s.mu.Lock()
		defer s.mu.Unlock()
		s.refreshing = false
		if err != nil {
			// Keep the keys; try again in a while, not on every delivery.
			s.readAt = s.now().Add(retryFailedRefresh - s.refresh)
		}
	}()
	// Within the delivery's own deadline too: a slow refresh must not push
	// the request it signs past its time.
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	_, err = s.reload(rctx)
}

func (s *Source) current() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}

// Reload reads the keys again now (the caller does this when a receiver
// refuses a signature) and reports whether the keys held now differ from
// those held when it was called. A caller comparing with the keys it signed with must compare
// those itself: another delivery may have reloaded first.
//
// It reads on every call, deliberately: a refusal right after a rotation
// must see the new keys, or the event is stored as a permanent failure. A
// receiver that refuses every signature therefore costs two reads per
// delivery (AWSCURRENT and AWSPENDING).
func (s *Source) Reload(ctx context.Context) (changed bool, err error) {
	return s.reload(ctx)
}

func (s *Source) reload(ctx context.Context) (bool, error) {
	s.mu.Lock()
	s.begun++
	n, before := s.begun, s.keys
	s.mu.Unlock()
	current, err := s.read(ctx, "AWSCURRENT")
	if err != nil {
		return false, err
	}
	keys := [][]byte{current}
	pending, err := s.read(ctx, "AWSPENDING")
	switch {
	case err == nil && !bytes.Equal(pending, current):
		keys = append(keys, pending)
	case err != nil && !isNotFound(err):
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.held {
		s.keys, s.readAt, s.held = keys, s.now(), n
	}
	// Else a read that began after this one has already stored its keys:
	// this one may hold the version before a rotation, so it is dropped.
	return !equalKeys(before, s.keys), nil
}

// read returns the decoded key of one version stage.
func (s *Source) read(ctx context.Context, stage string) ([]byte, error) {
	out, err := s.api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.id), VersionStage: aws.String(stage)})
	if err != nil {
		return nil, s.classify(stage, err)
	}
	key, err := webhooksig.DecodeSecret(aws.ToString(out.SecretString))
	if err != nil {
		return nil, idem.Permanent(fmt.Errorf("secret %s (%s): %w", s.id, stage, err))
	}
	return key, nil
}

type notFound struct{ error }

func (e notFound) Unwrap() error { return e.error }

func isNotFound(err error) bool {
	_, ok := errors.AsType[notFound](err)
	return ok
}

// classify names the secret and, for a denial, the permission; it never
// repeats the SDK's message body, which could echo request content.
func (s *Source) classify(stage string, err error) error {
	if _, ok := errors.AsType[*types.ResourceNotFoundException](err); ok {
		return notFound{idem.Permanent(fmt.Errorf("secret %s has no %s version (or does not exist)", s.id, stage))}
	}
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "AccessDeniedException":
			return idem.Permanent(fmt.Errorf("reading secret %s denied: the function's role needs %s on it (%s)", s.id, RequiredIAMActions()[0], api.ErrorCode()))
		case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException":
			return idem.Permanent(fmt.Errorf("reading secret %s: the credentials were refused (%s): missing, invalid or expired", s.id, api.ErrorCode()))
		case "DecryptionFailure":
			return idem.Permanent(fmt.Errorf("secret %s cannot be decrypted: the role needs kms:Decrypt on its key (%s)", s.id, api.ErrorCode()))
		}
		if api.ErrorFault() == smithy.FaultClient {
			return idem.Permanent(fmt.Errorf("secret %s: %s", s.id, api.ErrorCode()))
		}
	}
	return idem.Transient(fmt.Errorf("reading secret %s: %w", s.id, err))
}

func equalKeys(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

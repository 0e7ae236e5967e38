// Package secretsource reads secrets from AWS Secrets Manager and keeps
// them fresh, so that a rotation needs no redeploy. [Source] holds the
// webhook signing secret: it reads the AWSCURRENT version and, during a
// rotation, the AWSPENDING one: both are live, and deliveries are signed
// with each (receivers verify with whichever they hold). [Document] holds
// one secret's AWSCURRENT value parsed into a Go value (the inbound
// webhook sources). Both share one refresh rule (see Source.Keys).
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

// Source holds the live keys of one secret. It is safe for concurrent use.
type Source struct {
	api   API
	id    string
	cache cache[[][]byte]
}

// New returns a Source for the secret id (a name or an ARN), re-read after
// refresh (zero means DefaultRefresh). Call Load before use.
func New(api API, id string, refresh time.Duration) *Source {
	s := &Source{api: api, id: id}
	s.cache = newCache(refresh, s.readKeys)
	return s
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
func (s *Source) Keys(ctx context.Context) ([][]byte, error) { return s.cache.get(ctx) }

// Reload reads the keys again now (the caller does this when a receiver
// refuses a signature) and reports whether they differ from the keys held
// before. A caller comparing with the keys it signed with must compare
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
	prev, keys, err := s.cache.reload(ctx)
	if err != nil {
		return false, err
	}
	return !equalKeys(prev, keys), nil
}

// readKeys reads the current key and, during a rotation, the pending one.
func (s *Source) readKeys(ctx context.Context) ([][]byte, error) {
	current, err := s.read(ctx, "AWSCURRENT")
	if err != nil {
		return nil, err
	}
	keys := [][]byte{current}
	pending, err := s.read(ctx, "AWSPENDING")
	switch {
	case err == nil && !bytes.Equal(pending, current):
		keys = append(keys, pending)
	case err != nil && !isNotFound(err):
		return nil, err
	}
	return keys, nil
}

// read returns the decoded key of one version stage.
func (s *Source) read(ctx context.Context, stage string) ([]byte, error) {
	value, err := readStage(ctx, s.api, s.id, stage)
	if err != nil {
		return nil, err
	}
	key, err := webhooksig.DecodeSecret(value)
	if err != nil {
		return nil, idem.Permanent(fmt.Errorf("secret %s (%s): %w", s.id, stage, err))
	}
	return key, nil
}

// readStage returns the SecretString of one version stage of secret id.
func readStage(ctx context.Context, api API, id, stage string) (string, error) {
	out, err := api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id), VersionStage: aws.String(stage)})
	if err != nil {
		return "", classify(id, stage, err)
	}
	return aws.ToString(out.SecretString), nil
}

type notFound struct{ error }

func (e notFound) Unwrap() error { return e.error }

func isNotFound(err error) bool {
	_, ok := errors.AsType[notFound](err)
	return ok
}

// classify names the secret and, for a denial, the permission; it never
// repeats the SDK's message body, which could echo request content.
func classify(id, stage string, err error) error {
	if _, ok := errors.AsType[*types.ResourceNotFoundException](err); ok {
		return notFound{idem.Permanent(fmt.Errorf("secret %s has no %s version (or does not exist)", id, stage))}
	}
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "AccessDeniedException":
			return idem.Permanent(fmt.Errorf("reading secret %s denied: the function's role needs %s on it (%s)", id, RequiredIAMActions()[0], api.ErrorCode()))
		case "UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException":
			return idem.Permanent(fmt.Errorf("reading secret %s: the credentials were refused (%s): missing, invalid or expired", id, api.ErrorCode()))
		case "DecryptionFailure":
			return idem.Permanent(fmt.Errorf("secret %s cannot be decrypted: the role needs kms:Decrypt on its key (%s)", id, api.ErrorCode()))
		}
		if api.ErrorFault() == smithy.FaultClient {
			return idem.Permanent(fmt.Errorf("secret %s: %s", id, api.ErrorCode()))
		}
	}
	return idem.Transient(fmt.Errorf("reading secret %s: %w", id, err))
}

func equalKeys(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

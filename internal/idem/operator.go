package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxAudit bounds a record's audit, so that a record with an audit still
// holds the largest result a store accepts. Writers of audits (oncelyctl)
// drop their oldest entries to stay within it; stores refuse longer ones.
const MaxAudit = 2048

// Refusals of an operator's change. They describe the record as the caller
// read it; the store re-checks the same rule in its conditional write (see
// Operator).
var (
	// ErrLeaseLive: the record is IN_PROGRESS and its lease has not ended:
	// an owner may still be running the action.
	ErrLeaseLive = errors.New("the record is IN_PROGRESS under a live lease")
	// ErrNotReleasable: the record is SUCCEEDED; releasing it would run a
	// completed action again. Only a forget with Forget.RerunSucceeded
	// does that, as the operator's named choice.
	ErrNotReleasable = errors.New("the record is SUCCEEDED")
	// ErrAlreadyReleased: the record is released already (FAILED, code
	// RELEASED) and waits for its next delivery; releasing it again would
	// change nothing but its token and message.
	ErrAlreadyReleased = errors.New("the record is released already")
	// ErrRerunsSuccess: the record is SUCCEEDED, so forgetting it lets its
	// next delivery run a completed action a second time: a duplicate side
	// effect. Forget.RerunSucceeded is the operator's consent to that.
	ErrRerunsSuccess = errors.New("the record is SUCCEEDED: forgetting it lets its next delivery run the action again")
	// ErrOutcomeUnknown: the record is FAILED with CodeOutcomeUnknown: its
	// action sent a side effect and never learnt whether it happened.
	// Releasing or forgetting it lets the next delivery send it again,
	// perhaps a second time; Release.MayRepeatSideEffect or
	// Forget.MayRepeatSideEffect is the operator's consent to that, and no
	// other consent is (Force takes a live lease, RerunSucceeded re-runs a
	// success: neither says the operator knows this outcome is unknown).
	ErrOutcomeUnknown = errors.New("the record's outcome is unknown: its action may have had its side effect")
)

// Releasable reports whether an operator may release r at rel.Now, or why
// not (an error matching ErrNotReleasable, ErrAlreadyReleased, ErrLeaseLive
// or ErrOutcomeUnknown). A FAILED record may be released (permanent,
// exhausted, or retryable with its attempts reset) unless it is released
// already, so that a release is idempotent, and unless its outcome is
// unknown, which needs rel.MayRepeatSideEffect (its side effect may have
// happened, and may then happen twice); an IN_PROGRESS one once its lease
// has ended, or with rel.Force while it is live (the owner, if still
// running, is then fenced off, and its side effect may happen twice). A
// SUCCEEDED record never.
func Releasable(r Record, rel Release) error {
	switch r.Status {
	case StatusFailed:
		switch {
		case r.ErrorCode == CodeReleased:
			return ErrAlreadyReleased
		case r.ErrorCode == CodeOutcomeUnknown && !rel.MayRepeatSideEffect:
			return ErrOutcomeUnknown
		}
		return nil
	case StatusInProgress:
		if rel.Force || r.Claimable(rel.Now) {
			return nil
		}
		return fmt.Errorf("%w (%v left)", ErrLeaseLive, r.LeaseUntil.Sub(rel.Now).Round(time.Millisecond))
	case StatusSucceeded:
		return ErrNotReleasable
	}
	return fmt.Errorf("the record has unknown status %q", r.Status)
}

// Forgettable reports whether an operator may delete r at f.Now: any
// record but an IN_PROGRESS one under a live lease (an error matching
// ErrLeaseLive), whose owner would then complete into nothing while a
// duplicate reserved the key afresh, and but a SUCCEEDED one unless
// f.RerunSucceeded (an error matching ErrRerunsSuccess): the next delivery
// of a forgotten event runs its action, so forgetting a success repeats
// its side effect, which only the operator's named choice may do. A FAILED
// record whose outcome is unknown needs its own named choice,
// f.MayRepeatSideEffect (an error matching ErrOutcomeUnknown): its action
// may have succeeded.
func Forgettable(r Record, f Forget) error {
	switch {
	case r.Status == StatusInProgress && !r.Claimable(f.Now):
		return fmt.Errorf("%w (%v left)", ErrLeaseLive, r.LeaseUntil.Sub(f.Now).Round(time.Millisecond))
	case r.Status == StatusSucceeded && !f.RerunSucceeded:
		return ErrRerunsSuccess
	case r.Status == StatusFailed && r.ErrorCode == CodeOutcomeUnknown && !f.MayRepeatSideEffect:
		return ErrOutcomeUnknown
	}
	return nil
}

// Release is an operator's request to make a record run again.
type Release struct {
	Token string    // a fresh token: the previous owner, if still running, is fenced off
	Now   time.Time // the operator's clock, which judges the lease and expiry
	Force bool      // release an IN_PROGRESS record whose lease is live: its owner is fenced off, and its side effect may happen twice
	Audit string    // the record's audit after the release; at most MaxAudit bytes
	// MayRepeatSideEffect consents to releasing a FAILED record whose
	// outcome is unknown: its side effect may have happened, and the next
	// delivery may then do it a second time (see Releasable).
	MayRepeatSideEffect bool
}

// Released returns the record that releasing r writes: FAILED and
// retryable with code RELEASED (its message names the state it replaces),
// Attempts 0 so that the next delivery starts a full count, rel.Token, the
// lease ended at rel.Now, no hold-off (the operator's release is the one
// way to end a hold-off early), rel.Audit, and UpdatedAt rel.Now. The key,
// fingerprint, retention and CreatedAt are kept; a result is dropped. It
// is the one definition of a released record; stores write it as it is.
func Released(r Record, rel Release) Record {
	was := string(r.Status)
	switch {
	case r.Status == StatusFailed && r.ErrorMessage != "":
		was += " " + string(r.ErrorCode) + ": " + r.ErrorMessage
	case r.Status == StatusFailed:
		was += " " + string(r.ErrorCode)
	case r.Status == StatusInProgress:
		was += fmt.Sprintf(" (lease until %s)", r.LeaseUntil.UTC().Format(time.RFC3339Nano))
	}
	return Record{
		Key:          r.Key,
		Status:       StatusFailed,
		Fingerprint:  r.Fingerprint,
		Attempts:     0,
		Token:        rel.Token,
		LeaseUntil:   time.UnixMilli(rel.Now.UnixMilli()),
		ExpiresAt:    r.ExpiresAt,
		ErrorCode:    CodeReleased,
		ErrorMessage: Truncate(fmt.Sprintf("released by an operator after %d attempt(s); was %s", r.Attempts, was), maxMessageLen),
		Retryable:    true,
		CreatedAt:    r.CreatedAt,
		UpdatedAt:    time.UnixMilli(rel.Now.UnixMilli()),
		Audit:        rel.Audit,
	}
}

// StillAsRead reports whether stored is still the record an operator read
// as read, as far as an Operator compares them (see Operator): the same
// token, status and attempts, and, of a FAILED record, the same error code
// and retryable flag, the fields of a failure that Releasable and
// Forgettable judge. A store that compares in its own query language (a
// condition expression) states exactly these fields.
func StillAsRead(read, stored Record) bool {
	same := stored.Token == read.Token && stored.Status == read.Status && stored.Attempts == read.Attempts
	if read.Status == StatusFailed {
		same = same && stored.ErrorCode == read.ErrorCode && stored.Retryable == read.Retryable
	}
	return same
}

// ReleasedBy reports whether r is the record a release with token wrote:
// how a store recognises a re-sent Release (see Operator).
func ReleasedBy(r Record, token string) bool {
	return token != "" && r.Token == token && r.Status == StatusFailed && r.ErrorCode == CodeReleased
}

// Forget is an operator's request to delete a record.
type Forget struct {
	Token string    // names this forget, so that a re-send of it can find it (see Operator); empty: no re-send is recognised
	Now   time.Time // the operator's clock, which judges the lease and expiry
	Audit string    // who and why; a store may keep it in a note once the record is gone
	// RerunSucceeded consents to forgetting a SUCCEEDED record, whose next
	// delivery then runs the action again (see Forgettable).
	RerunSucceeded bool
	// MayRepeatSideEffect consents to forgetting a FAILED record whose
	// outcome is unknown: its side effect may have happened, and the next
	// delivery may then do it a second time (see Forgettable).
	MayRepeatSideEffect bool
}

// Operator is the part of a store that operators use to repair records
// after an incident (oncelyctl release and forget). It is optional: the
// engine never calls it. This comment is the contract, and the
// conformance suite (storetest.RunOperatorTests) checks it.
//
// Both methods are a compare-and-swap on what the operator saw: they act
// only if the stored record is still prev as StillAsRead compares them
// (its token, status and attempts, and of a FAILED record its error code
// and retryable flag) and is unexpired at the request's Now, and if the
// rule (Releasable, Forgettable) allows it on the stored values: an
// IN_PROGRESS record's stored lease is judged at Now, and a FAILED one's
// stored error code is the one the rule judged in prev. Checking the rule
// on prev alone is not enough: a failure rewritten under the same token
// between the operator's read and the write (OUTCOME_UNKNOWN over a
// retryable failure) would be released as the failure that was read.
// Otherwise they write nothing and return the record they found (a zero
// Record if there is none or it has expired) with ok false. Of a release
// racing a take-over of the same record, exactly one succeeds.
//
// A write whose reply was lost is sent again (by the SDK, or by the
// operator), and its compare-and-swap then fails against its own write. So
// a re-send is recognised by the request's token: a Release with the same
// r.Token that finds the record it wrote (r.Token, FAILED, RELEASED)
// returns that record with ok true, and a Forget with the same non-empty
// f.Token whose own forget already happened returns prev with ok true.
type Operator interface {
	// Release replaces prev with Released(prev, r) and returns it.
	Release(ctx context.Context, prev Record, r Release) (rec Record, ok bool, err error)
	// Forget deletes prev; the next delivery of its event reserves the key
	// afresh, with any payload.
	Forget(ctx context.Context, prev Record, f Forget) (rec Record, ok bool, err error)
}

package idem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
)

func TestReleasableAndForgettable(t *testing.T) {
	now := time.UnixMilli(1_780_000_000_123)
	tests := []struct {
		name          string
		rec           idem.Record
		force         bool
		releaseErr    error // nil: releasable
		forgettable   bool  // without consent to re-run a success
		wantSubstring string
	}{
		{"permanent failure", idem.Record{Status: idem.StatusFailed, ErrorCode: "HTTP_422"}, false, nil, true, ""},
		{"retry exhausted", idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeRetryExhausted}, false, nil, true, ""},
		{"retryable failure", idem.Record{Status: idem.StatusFailed, Retryable: true}, false, nil, true, ""},
		{"lease ended", idem.Record{Status: idem.StatusInProgress, LeaseUntil: now.Add(-time.Millisecond)}, false, nil, true, ""},
		{"lease ends exactly now", idem.Record{Status: idem.StatusInProgress, LeaseUntil: now}, false, nil, true, ""},
		{"live lease", idem.Record{Status: idem.StatusInProgress, LeaseUntil: now.Add(1500 * time.Millisecond)}, false, idem.ErrLeaseLive, false, "1.5s left"},
		{"live lease forced", idem.Record{Status: idem.StatusInProgress, LeaseUntil: now.Add(time.Second)}, true, nil, false, ""},
		{"succeeded", idem.Record{Status: idem.StatusSucceeded}, false, idem.ErrNotReleasable, false, ""},
		{"succeeded forced", idem.Record{Status: idem.StatusSucceeded}, true, idem.ErrNotReleasable, false, ""},
		{"released already", idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeReleased, Retryable: true}, false, idem.ErrAlreadyReleased, true, ""},
		{"released already forced", idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeReleased, Retryable: true}, true, idem.ErrAlreadyReleased, true, ""},
		{"outcome unknown", idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeOutcomeUnknown}, false, idem.ErrOutcomeUnknown, false, ""},
		{"outcome unknown forced", idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeOutcomeUnknown}, true, idem.ErrOutcomeUnknown, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := idem.Releasable(tt.rec, idem.Release{Now: now, Force: tt.force})
			if tt.releaseErr == nil && err != nil || tt.releaseErr != nil && !errors.Is(err, tt.releaseErr) {
				t.Errorf("Releasable(force %v) = %v, want %v", tt.force, err, tt.releaseErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantSubstring) {
				t.Errorf("Releasable error %q, want it to contain %q", err, tt.wantSubstring)
			}
			if got := idem.Forgettable(tt.rec, idem.Forget{Now: now}) == nil; got != tt.forgettable {
				t.Errorf("Forgettable(rerun false) = %v, want %v", got, tt.forgettable)
			}
		})
	}
}

// TestForgettingASuccessNeedsConsent: forgetting a SUCCEEDED record lets
// its next delivery run the action a second time, so it is refused unless
// the operator consents; consent changes nothing for the other records.
func TestForgettingASuccessNeedsConsent(t *testing.T) {
	now := time.UnixMilli(1_780_000_000_123)
	succeeded := idem.Record{Status: idem.StatusSucceeded}
	if err := idem.Forgettable(succeeded, idem.Forget{Now: now}); !errors.Is(err, idem.ErrRerunsSuccess) {
		t.Errorf("Forgettable(SUCCEEDED, rerun false) = %v, want ErrRerunsSuccess", err)
	}
	if err := idem.Forgettable(succeeded, idem.Forget{Now: now, RerunSucceeded: true}); err != nil {
		t.Errorf("Forgettable(SUCCEEDED, rerun true) = %v, want nil", err)
	}
	live := idem.Record{Status: idem.StatusInProgress, LeaseUntil: now.Add(time.Second)}
	if err := idem.Forgettable(live, idem.Forget{Now: now, RerunSucceeded: true, MayRepeatSideEffect: true}); !errors.Is(err, idem.ErrLeaseLive) {
		t.Errorf("Forgettable(live lease, rerun true) = %v, want ErrLeaseLive: consent to re-run a success is no consent to race an owner", err)
	}
	failed := idem.Record{Status: idem.StatusFailed, ErrorCode: "HTTP_422"}
	for _, rerun := range []bool{false, true} {
		if err := idem.Forgettable(failed, idem.Forget{Now: now, RerunSucceeded: rerun}); err != nil {
			t.Errorf("Forgettable(FAILED, rerun %v) = %v, want nil", rerun, err)
		}
	}
}

// TestAnUnknownOutcomeNeedsConsent: an OUTCOME_UNKNOWN failure's action
// may have had its side effect, so neither a release nor a forget lets its
// next delivery send it again without the operator's consent to that,
// MayRepeatSideEffect; consent to take a live lease (Force) or to re-run a
// success (RerunSucceeded) is not it.
func TestAnUnknownOutcomeNeedsConsent(t *testing.T) {
	now := time.UnixMilli(1_780_000_000_123)
	unknown := idem.Record{Status: idem.StatusFailed, ErrorCode: idem.CodeOutcomeUnknown}
	for _, rel := range []idem.Release{{Now: now}, {Now: now, Force: true}} {
		if err := idem.Releasable(unknown, rel); !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Errorf("Releasable(OUTCOME_UNKNOWN, force %v) = %v, want ErrOutcomeUnknown", rel.Force, err)
		}
	}
	for _, f := range []idem.Forget{{Now: now}, {Now: now, RerunSucceeded: true}} {
		if err := idem.Forgettable(unknown, f); !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Errorf("Forgettable(OUTCOME_UNKNOWN, rerun %v) = %v, want ErrOutcomeUnknown", f.RerunSucceeded, err)
		}
	}
	if err := idem.Releasable(unknown, idem.Release{Now: now, MayRepeatSideEffect: true}); err != nil {
		t.Errorf("Releasable(OUTCOME_UNKNOWN, may repeat) = %v, want nil", err)
	}
	if err := idem.Forgettable(unknown, idem.Forget{Now: now, MayRepeatSideEffect: true}); err != nil {
		t.Errorf("Forgettable(OUTCOME_UNKNOWN, may repeat) = %v, want nil", err)
	}
	// The consent is to an unknown outcome only: it neither takes a live
	// lease nor re-runs a success.
	live := idem.Record{Status: idem.StatusInProgress, LeaseUntil: now.Add(time.Second)}
	if err := idem.Releasable(live, idem.Release{Now: now, MayRepeatSideEffect: true}); !errors.Is(err, idem.ErrLeaseLive) {
		t.Errorf("Releasable(live lease, may repeat) = %v, want ErrLeaseLive", err)
	}
	if err := idem.Forgettable(idem.Record{Status: idem.StatusSucceeded}, idem.Forget{Now: now, MayRepeatSideEffect: true}); !errors.Is(err, idem.ErrRerunsSuccess) {
		t.Errorf("Forgettable(SUCCEEDED, may repeat) = %v, want ErrRerunsSuccess", err)
	}
}

func TestReleasedRecord(t *testing.T) {
	now := time.UnixMilli(1_780_000_000_123)
	created := now.Add(-time.Hour)
	prev := idem.Record{
		Key: "evt:order-1:refund", Status: idem.StatusFailed, Fingerprint: strings.Repeat("a", 64), Attempts: 3,
		Token: "old", LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(48 * time.Hour),
		ErrorCode: "HTTP_422", ErrorMessage: "422 from downstream", CreatedAt: created, UpdatedAt: now.Add(-time.Minute),
		Audit: "old audit",
	}
	got := idem.Released(prev, idem.Release{Token: "new", Now: now, Audit: "new audit"})
	want := idem.Record{
		Key: prev.Key, Status: idem.StatusFailed, Fingerprint: prev.Fingerprint, Attempts: 0, Token: "new",
		LeaseUntil: now, ExpiresAt: prev.ExpiresAt, ErrorCode: idem.CodeReleased,
		ErrorMessage: "released by an operator after 3 attempt(s); was FAILED HTTP_422: 422 from downstream",
		Retryable:    true, CreatedAt: created, UpdatedAt: now, Audit: "new audit",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Released (-want +got):\n%s", diff)
	}
	if !got.Claimable(now) {
		t.Errorf("a released record is not claimable at the release's instant; want claimable")
	}
	inProgress := idem.Record{Status: idem.StatusInProgress, LeaseUntil: now, Attempts: 1}
	if msg := idem.Released(inProgress, idem.Release{Now: now}).ErrorMessage; !strings.Contains(msg, "was IN_PROGRESS (lease until") {
		t.Errorf("released IN_PROGRESS message %q, want it to name the lease it replaced", msg)
	}
	long := prev
	long.ErrorMessage = strings.Repeat("x", 5000)
	if n := len(idem.Released(long, idem.Release{Now: now}).ErrorMessage); n > 1024 {
		t.Errorf("released message is %d bytes, want at most 1024", n)
	}
}

// TestStillAsReadComparesWhatTheRuleJudged: an operator's compare-and-swap
// covers the token, status and attempts, and of a failure the code and
// retryable flag that Releasable and Forgettable read; nothing else.
func TestStillAsReadComparesWhatTheRuleJudged(t *testing.T) {
	read := idem.Record{Key: "k", Status: idem.StatusFailed, Token: "tok", Attempts: 2, ErrorCode: idem.CodeTransientFailure, ErrorMessage: "timed out", Retryable: true}
	tests := []struct {
		name   string
		change func(*idem.Record)
		same   bool
	}{
		{"unchanged", func(*idem.Record) {}, true},
		{"another message", func(r *idem.Record) { r.ErrorMessage = "reworded" }, true},
		{"another audit", func(r *idem.Record) { r.Audit = "[]" }, true},
		{"another token", func(r *idem.Record) { r.Token = "other" }, false},
		{"another status", func(r *idem.Record) { r.Status = idem.StatusInProgress }, false},
		{"other attempts", func(r *idem.Record) { r.Attempts++ }, false},
		{"another code", func(r *idem.Record) { r.ErrorCode = idem.CodeOutcomeUnknown }, false},
		{"not retryable", func(r *idem.Record) { r.Retryable = false }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := read
			tt.change(&stored)
			if got := idem.StillAsRead(read, stored); got != tt.same {
				t.Errorf("StillAsRead = %v, want %v", got, tt.same)
			}
		})
	}
	// A record that is not FAILED has no failure fields to judge.
	live := idem.Record{Status: idem.StatusInProgress, Token: "tok", Attempts: 1}
	if stored := live; !idem.StillAsRead(live, stored) {
		t.Error("StillAsRead(IN_PROGRESS, itself) = false, want true")
	}
}

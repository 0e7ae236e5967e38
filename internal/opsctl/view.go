package opsctl

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
)

// RecordView is a record as --json prints it. Decoding it and encoding it
// again gives the same bytes, and Record gives back the record it was made
// from.
type RecordView struct {
	Key string `json:"key"`
	// State says in one word what the function will do with the record
	// (see States): the word the text's STATE column prints and list
	// --status takes.
	State        string      `json:"state"`
	Status       idem.Status `json:"status"`
	Retryable    bool        `json:"retryable"`
	ErrorCode    idem.Code   `json:"error_code,omitempty"`
	ErrorMessage string      `json:"error_message,omitempty"`
	Attempts     int         `json:"attempts"`
	Token        string      `json:"token"`
	Fingerprint  string      `json:"fingerprint"`
	// LeaseUntil is set for IN_PROGRESS records only, as get prints it: a
	// finished record's lease means nothing.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	ExpiresAt  time.Time  `json:"expires_at"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	// Result is a stored result that is UTF-8 text; ResultBase64 one that
	// is not. Neither is set when nothing is stored.
	Result       *string `json:"result,omitempty"`
	ResultBase64 string  `json:"result_base64,omitempty"`
	// Audit is what operators did to the record; AuditRaw holds an audit
	// that is not oncelyctl's format, as stored.
	Audit    []AuditEntry `json:"audit,omitempty"`
	AuditRaw string       `json:"audit_raw,omitempty"`
}

// AuditEntry is one operator's change to a record.
type AuditEntry struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Op     string    `json:"op"` // release, release --force, release --may-repeat-side-effect (or both), forget
	Reason string    `json:"reason,omitempty"`
	Was    string    `json:"was"` // the state it replaced
}

// maxReason bounds one entry's reason, so that an audit keeps several.
const maxReason = 256

// appendAudit adds e to a stored audit, dropping the oldest entries to stay
// within idem.MaxAudit. A stored audit in another format is replaced.
func appendAudit(raw string, e AuditEntry) (string, error) {
	var entries []AuditEntry
	if raw != "" && json.Unmarshal([]byte(raw), &entries) != nil {
		entries = nil
	}
	if len(e.Reason) > maxReason {
		e.Reason = idem.Truncate(e.Reason, maxReason) + "…"
	}
	entries = append(entries, e)
	for {
		b, err := json.Marshal(entries)
		if err != nil {
			return "", err
		}
		if len(b) <= idem.MaxAudit {
			return string(b), nil
		}
		if len(entries) == 1 {
			return "", fmt.Errorf("the audit entry is %d bytes; at most %d fit", len(b), idem.MaxAudit)
		}
		entries = entries[1:]
	}
}

// The states: what the function does with a record, one word each. They
// are the one vocabulary of the STATE column, the JSON's "state", stats'
// STATE and list --status, which also takes the groups in_progress
// (running and abandoned), failed (permanent, retryable and released) and
// all (see statusFilters).
const (
	StateRunning   = "running"   // IN_PROGRESS, lease live: an owner is running the action
	StateAbandoned = "abandoned" // IN_PROGRESS, lease ended: the owner stopped; the next delivery takes it over
	StateSucceeded = "succeeded" // SUCCEEDED: replayed to every delivery
	StatePermanent = "permanent" // FAILED for good: replayed to every delivery until released
	StateRetryable = "retryable" // FAILED, retryable: the next delivery runs it again
	StateReleased  = "released"  // FAILED, released by an operator: the next delivery runs it again
	StateExpired   = "expired"   // past its retention: counts as absent (get shows it; listings never do)
	StatePoison    = "poison"    // a poison note (stats' STATE for notes; list --poison lists them)
)

// state names what the function does with rec at now.
func state(rec idem.Record, now time.Time) string {
	switch {
	case rec.Expired(now):
		return StateExpired
	case rec.Status == idem.StatusInProgress && rec.Claimable(now):
		return StateAbandoned
	case rec.Status == idem.StatusInProgress:
		return StateRunning
	case rec.Status == idem.StatusSucceeded:
		return StateSucceeded
	case rec.Status == idem.StatusFailed && rec.ErrorCode == idem.CodeReleased:
		return StateReleased
	case rec.Status == idem.StatusFailed && rec.Retryable:
		return StateRetryable
	case rec.Status == idem.StatusFailed:
		return StatePermanent
	}
	return "unknown"
}

// view makes the --json form of rec.
func view(rec idem.Record, now time.Time) RecordView {
	v := RecordView{
		Key: rec.Key, State: state(rec, now), Status: rec.Status, Retryable: rec.Retryable,
		ErrorCode: rec.ErrorCode, ErrorMessage: rec.ErrorMessage, Attempts: rec.Attempts,
		Token: rec.Token, Fingerprint: rec.Fingerprint,
		ExpiresAt: rec.ExpiresAt.UTC(), CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.UpdatedAt.UTC(),
	}
	if rec.Status == idem.StatusInProgress {
		lease := rec.LeaseUntil.UTC()
		v.LeaseUntil = &lease
	}
	switch {
	case rec.Result == nil:
	case utf8.Valid(rec.Result):
		s := string(rec.Result)
		v.Result = &s
	default:
		v.ResultBase64 = base64.StdEncoding.EncodeToString(rec.Result)
	}
	if rec.Audit != "" {
		if json.Unmarshal([]byte(rec.Audit), &v.Audit) != nil || len(v.Audit) == 0 {
			v.Audit, v.AuditRaw = nil, rec.Audit
		}
	}
	return v
}

// Record returns the record v was made from, but for the lease of a
// record that is not IN_PROGRESS, which the view leaves out (zero).
func (v RecordView) Record() (idem.Record, error) {
	rec := idem.Record{
		Key: v.Key, Status: v.Status, Retryable: v.Retryable, ErrorCode: v.ErrorCode, ErrorMessage: v.ErrorMessage,
		Attempts: v.Attempts, Token: v.Token, Fingerprint: v.Fingerprint,
		ExpiresAt: v.ExpiresAt, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		Audit: v.AuditRaw,
	}
	if v.LeaseUntil != nil {
		rec.LeaseUntil = *v.LeaseUntil
	}
	switch {
	case v.Result != nil:
		rec.Result = []byte(*v.Result)
	case v.ResultBase64 != "":
		b, err := base64.StdEncoding.DecodeString(v.ResultBase64)
		if err != nil {
			return idem.Record{}, fmt.Errorf("record %q: result_base64: %w", v.Key, err)
		}
		rec.Result = b
	}
	if len(v.Audit) > 0 {
		b, err := json.Marshal(v.Audit)
		if err != nil {
			return idem.Record{}, err
		}
		rec.Audit = string(b)
	}
	return rec, nil
}

// PoisonView is a poison note as --json prints it.
type PoisonView struct {
	MessageID string `json:"message_id"`
	// Key is the key the message gave, where one was computed (a
	// KEY_REUSED note names the record to look at).
	Key        string    `json:"key,omitempty"`
	Reason     idem.Code `json:"reason"`
	Detail     string    `json:"detail"`
	BodySHA256 string    `json:"body_sha256"`
	BodySize   int       `json:"body_size"`
	At         time.Time `json:"at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func poisonView(p idem.Poison) PoisonView {
	return PoisonView{MessageID: p.ID, Key: p.Key, Reason: p.Reason, Detail: p.Detail, BodySHA256: p.BodySHA256, BodySize: p.BodySize,
		At: p.At.UTC(), ExpiresAt: p.ExpiresAt.UTC()}
}

// ListView is what list --json prints, and what release and forget read
// with --stdin.
type ListView struct {
	Records []RecordView  `json:"records"`
	Poison  []PoisonView  `json:"poison,omitempty"`
	Next    string        `json:"next,omitempty"`
	Cost    ddbstore.Cost `json:"cost"`
}

// ForgottenView is a forget note as get --json prints it.
type ForgottenView struct {
	Status      idem.Status  `json:"status"`
	ErrorCode   idem.Code    `json:"error_code,omitempty"`
	Fingerprint string       `json:"fingerprint"`
	Attempts    int          `json:"attempts"`
	At          time.Time    `json:"at"`
	Audit       []AuditEntry `json:"audit,omitempty"`
}

// GetView is what get --json prints.
type GetView struct {
	Key       string         `json:"key"`
	Found     bool           `json:"found"`
	Record    *RecordView    `json:"record,omitempty"`
	Forgotten *ForgottenView `json:"forgotten,omitempty"`
	// PayloadMatches says, for get --body, whether the body's fingerprint
	// is the stored one (false: the function refuses it as KEY_REUSED).
	PayloadMatches *bool `json:"payload_matches,omitempty"`
}

// ResultView is one key's outcome in release and forget.
type ResultView struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"` // released, forgotten, would_release, would_forget, already_released, refused, not_found
	Detail  string `json:"detail,omitempty"`
	// RerunsSuccess marks a SUCCEEDED record: forgetting it lets its next
	// delivery run the action again, a second side effect (forget does it
	// only with --rerun-succeeded).
	RerunsSuccess bool `json:"reruns_success,omitempty"`
	// Resend marks a released permanent failure of an SQS event: its
	// message was acknowledged and has left the queue, so it runs again
	// only when the event is sent again.
	Resend bool        `json:"resend,omitempty"`
	Record *RecordView `json:"record,omitempty"` // after the write, or as found
}

// ResultsView is what release and forget print with --json.
type ResultsView struct {
	DryRun  bool         `json:"dry_run"`
	By      string       `json:"by,omitempty"`
	Reason  string       `json:"reason,omitempty"`
	Results []ResultView `json:"results"`
}

// StatsView is what stats prints with --json.
type StatsView struct {
	Since  time.Time     `json:"since"`
	Until  time.Time     `json:"until"`
	Counts []Count       `json:"counts"`
	Cost   ddbstore.Cost `json:"cost"`
	// NotCounted names the states the listing left out (the index holds
	// only FAILED records and poison notes); stats --scan counts them.
	NotCounted []string `json:"not_counted,omitempty"`
}

// Count is the number of records (or poison notes) of one status, state
// and code.
type Count struct {
	Status string    `json:"status"`
	State  string    `json:"state"` // see States; "poison" for poison notes
	Code   idem.Code `json:"code,omitempty"`
	Count  int       `json:"count"`
}

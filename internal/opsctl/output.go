package opsctl

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
)

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table { return &table{tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)} }

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// stamp prints a time in UTC to the millisecond, with how long ago or
// ahead it is.
func stamp(at, now time.Time) string {
	if at.IsZero() || at.Unix() == 0 {
		return "-"
	}
	s := at.UTC().Format("2006-01-02T15:04:05.000Z")
	switch d := now.Sub(at); {
	case d >= 0:
		return s + " (" + ago(d) + " ago)"
	default:
		return s + " (in " + ago(-d) + ")"
	}
}

// ago rounds a duration for people.
func ago(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}

// explain says, for people, what the function will do with rec.
func explain(rec idem.Record, now time.Time) string {
	switch state(rec, now) {
	case StateExpired:
		return "expired at " + stamp(rec.ExpiresAt, now) + ": the function treats it as absent, so a delivery now runs the action again"
	case StateAbandoned:
		return "abandoned (IN_PROGRESS, lease ended): the owner stopped (a crash or a timeout); the next delivery takes the key over and runs the action again"
	case StateRunning:
		return "running (IN_PROGRESS, lease live): an owner is running the action; deliveries until the lease ends are refused (IN_PROGRESS, back to the queue)"
	case StateSucceeded:
		return "succeeded (SUCCEEDED): every delivery gets the stored result until the record expires"
	case StateReleased:
		return "released (FAILED, released by an operator): the next delivery takes the key over and runs the action again"
	case StateRetryable:
		return "retryable (FAILED, retryable): the next delivery (a redelivery, or a DLQ redrive) takes the key over and runs the action again; no release needed"
	case StatePermanent:
		return "permanent (FAILED for good): every delivery gets this failure again, without running the action; `oncelyctl release` makes the next delivery run it"
	}
	return string(rec.Status)
}

// short puts s on one line (runs of white space become one space) and cuts
// it to n bytes, marking the cut with "…".
func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = idem.Truncate(s, n) + "…"
	}
	return s
}

// printRecord prints one record for people.
func printRecord(w io.Writer, rec idem.Record, now time.Time) error {
	t := newTable(w)
	t.row("key", rec.Key)
	t.row("state", explain(rec, now))
	if rec.Status == idem.StatusFailed {
		t.row("error", string(rec.ErrorCode)+": "+short(rec.ErrorMessage, 200))
		if rec.ErrorMessage == idem.Sentence(rec.ErrorCode) {
			// The function stores a code and a fixed sentence, what API
			// callers see; the detail is in its log (older records hold it).
			t.row("detail", fmt.Sprintf(`not stored: in the function's log, the "attempt failed" line with key=%s, just before %s`,
				rec.Key, rec.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z")))
		}
	}
	t.row("attempts", fmt.Sprint(rec.Attempts))
	switch {
	case rec.Status != idem.StatusInProgress:
		t.row("lease", "-")
	case rec.Claimable(now):
		t.row("lease", "ended "+stamp(rec.LeaseUntil, now))
	default:
		t.row("lease", "live until "+stamp(rec.LeaseUntil, now))
	}
	switch {
	case rec.HoldUntil.IsZero():
	case rec.Claimable(now):
		t.row("hold-off", "ended "+stamp(rec.HoldUntil, now))
	default:
		// Released after a request that may have reached its receiver:
		// deliveries wait until then; a release ends it at once.
		t.row("hold-off", "until "+stamp(rec.HoldUntil, now)+" (the last request may still be with its receiver)")
	}
	t.row("expires", stamp(rec.ExpiresAt, now))
	t.row("created", stamp(rec.CreatedAt, now))
	t.row("updated", stamp(rec.UpdatedAt, now))
	t.row("fingerprint", rec.Fingerprint)
	t.row("token", rec.Token)
	v := view(rec, now)
	switch {
	case v.Result != nil:
		t.row("result", short(*v.Result, 200))
	case v.ResultBase64 != "":
		t.row("result", fmt.Sprintf("%d bytes, not text (--json has them in base64)", len(rec.Result)))
	}
	for i, e := range v.Audit {
		label := ""
		if i == 0 {
			label = "audit"
		}
		t.row(label, auditLine(e))
	}
	if v.AuditRaw != "" {
		t.row("audit", short(v.AuditRaw, 200))
	}
	return t.flush()
}

func auditLine(e AuditEntry) string {
	s := e.At.UTC().Format(time.RFC3339) + " " + e.Op + " by " + e.By
	if e.Reason != "" {
		s += fmt.Sprintf(": %q", e.Reason)
	}
	return s + " (was " + e.Was + ")"
}

// costLine says what a listing read.
func costLine(c ddbstore.Cost, info ddbstore.TableInfo) string {
	var s string
	if c.Method == "query" {
		s = fmt.Sprintf("query of index %s: %s, %s read", ddbstore.IndexTriage, plural(c.Calls, "call", "calls"), plural(c.ItemsRead, "item", "items"))
	} else {
		s = fmt.Sprintf("scan of the whole table (about %d items, %d bytes, by DescribeTable): %s, %s read", info.ItemCount, info.SizeBytes,
			plural(c.Calls, "call", "calls"), plural(c.ItemsRead, "item", "items"))
	}
	if c.CapacityReported {
		s += fmt.Sprintf(", %.1f read capacity units consumed", c.CapacityUnits)
	} else {
		s += ", consumed capacity not reported by the server"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

package opsctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
)

func (r *runner) get(ctx context.Context, args []string) error {
	fs := r.flags()
	var k keyFlags
	k.register(fs)
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	s, err := r.resolve()
	if err != nil {
		return err
	}
	keys, err := r.keys(k, pos, s.KeyExpr.Value)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usagef("get takes one key, got %d", len(keys))
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	now := r.env.Now()
	key := keys[0]
	rec, found, err := r.admin.Inspect(ctx, key.key)
	if err != nil {
		return err
	}
	out := GetView{Key: key.key, Found: found && !rec.Expired(now)}
	if found {
		v := view(rec, now)
		out.Record = &v
		if key.fingerprint != "" {
			match := key.fingerprint == rec.Fingerprint
			out.PayloadMatches = &match
		}
	} else {
		note, ok, err := r.admin.GetForgotten(ctx, key.key, now)
		if err != nil {
			return err
		}
		if ok {
			fv := ForgottenView{Status: note.Status, ErrorCode: note.ErrorCode, Fingerprint: note.Fingerprint, Attempts: note.Attempts, At: note.At.UTC()}
			_ = json.Unmarshal([]byte(note.Audit), &fv.Audit)
			out.Forgotten = &fv
		}
	}
	if r.json {
		if err := r.printJSON(out); err != nil {
			return err
		}
	} else if found {
		if err := printRecord(r.env.Stdout, rec, now); err != nil {
			return err
		}
		if out.PayloadMatches != nil && *out.PayloadMatches {
			fmt.Fprintln(r.env.Stdout, "payload      the body's fingerprint matches the stored one")
		} else if out.PayloadMatches != nil {
			fmt.Fprintln(r.env.Stdout, "payload      DIFFERS from the stored fingerprint: the function refuses this body as KEY_REUSED (forget the record to let it run)")
		}
	} else if out.Forgotten != nil {
		fmt.Fprintf(r.env.Stdout, "%s: no record; forgotten %s (it was %s %s, %s)\n", key.key, stamp(out.Forgotten.At, now),
			out.Forgotten.Status, out.Forgotten.ErrorCode, plural(out.Forgotten.Attempts, "attempt", "attempts"))
		for _, e := range out.Forgotten.Audit {
			fmt.Fprintln(r.env.Stdout, "  "+auditLine(e))
		}
	}
	switch {
	case !found:
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("no record for key %q in namespace %q of table %q", key.key, r.admin.Namespace(), r.admin.Table())}
	case rec.Expired(now):
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("the record for key %q expired at %s: the function treats it as absent", key.key, rec.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// listFlags are the filters of list and stats.
type listFlags struct {
	status, code, reason, since, until, cursor string
	poison, scan                               bool
	limit                                      int
}

func (l *listFlags) register(fs *flag.FlagSet, paging bool) {
	if paging {
		fs.StringVar(&l.status, "status", "failed", "failed, in_progress, succeeded or all (only failed is indexed; the others scan)")
		fs.StringVar(&l.code, "code", "", "only records with this error code (HTTP_422, RETRY_EXHAUSTED, RELEASED, ...)")
		fs.BoolVar(&l.poison, "poison", false, "list poison notes instead of records")
		fs.StringVar(&l.reason, "reason", "", "with --poison: only notes with this reason (NOT_JSON, KEY_REUSED, ...)")
		fs.IntVar(&l.limit, "limit", ddbstore.DefaultListLimit, "at most this many items (1 to 1000); --cursor pages on")
		fs.StringVar(&l.cursor, "cursor", "", "continue a listing: the cursor the previous page printed")
	}
	fs.StringVar(&l.since, "since", "", "only items written since: a duration before now (24h) or an RFC 3339 time")
	fs.StringVar(&l.until, "until", "", "only items written until: a duration before now or an RFC 3339 time")
	fs.BoolVar(&l.scan, "scan", false, "read with a Scan of the whole table even where the index serves (costs the whole table)")
}

// query turns the flags into a listing query.
func (l *listFlags) query(now time.Time) (ddbstore.Query, error) {
	q := ddbstore.Query{Poison: l.poison, Code: idem.Code(l.code), Scan: l.scan, Limit: l.limit, Cursor: l.cursor, Now: now}
	if l.poison {
		if l.code != "" {
			return q, usagef("--code selects records; with --poison, use --reason")
		}
		q.Code = idem.Code(l.reason)
	} else if l.reason != "" {
		return q, usagef("--reason selects poison notes: add --poison, or use --code for records")
	}
	switch strings.ToLower(l.status) {
	case "failed", "":
		q.Status = idem.StatusFailed
	case "in_progress", "in-progress":
		q.Status = idem.StatusInProgress
	case "succeeded":
		q.Status = idem.StatusSucceeded
	case "all":
	default:
		return q, usagef("--status %q: want failed, in_progress, succeeded or all", l.status)
	}
	var err error
	if q.Since, err = parseWindow(l.since, now); err != nil {
		return q, usagef("--since: %v", err)
	}
	if q.Until, err = parseWindow(l.until, now); err != nil {
		return q, usagef("--until: %v", err)
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Until.Before(q.Since) {
		return q, usagef("--until is before --since")
	}
	if q.Limit < 1 || q.Limit > 1000 {
		return q, usagef("--limit %d: want 1 to 1000", q.Limit)
	}
	return q, nil
}

// parseWindow reads a time bound: a duration before now, or an RFC 3339 time.
func parseWindow(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration before now (24h, 90m) nor an RFC 3339 time (2026-12-01T09:00:00Z)", v)
}

func (r *runner) list(ctx context.Context, args []string) error {
	fs := r.flags()
	var l listFlags
	l.register(fs, true)
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("list takes flags only, got %q", pos)
	}
	now := r.env.Now()
	q, err := l.query(now)
	if err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	p, err := r.admin.List(ctx, q)
	if errors.Is(err, ddbstore.ErrBadCursor) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if r.json {
		out := ListView{Records: []RecordView{}, Next: p.Next, Cost: p.Cost}
		for _, rec := range p.Records {
			out.Records = append(out.Records, view(rec, now))
		}
		for _, n := range p.Poison {
			out.Poison = append(out.Poison, poisonView(n))
		}
		return r.printJSON(out)
	}
	w := r.env.Stdout
	t := newTable(w)
	if q.Poison {
		t.row("AT (UTC)", "MESSAGE ID", "REASON", "BODY", "DETAIL")
		for _, n := range p.Poison {
			t.row(n.At.UTC().Format("2006-01-02T15:04:05Z"), n.ID, string(n.Reason), fmt.Sprintf("%d bytes, sha256 %.12s…", n.BodySize, n.BodySHA256), short(n.Detail, 60))
		}
	} else {
		t.row("UPDATED (UTC)", "KEY", "STATE", "CODE", "ATTEMPTS", "MESSAGE")
		for _, rec := range p.Records {
			t.row(rec.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"), rec.Key, state(rec, now), dash(string(rec.ErrorCode)), strconv.Itoa(rec.Attempts), dash(short(rec.ErrorMessage, 60)))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	n := len(p.Records)
	what := plural(n, "record", "records")
	if q.Poison {
		n = len(p.Poison)
		what = plural(n, "poison note", "poison notes")
	}
	fmt.Fprintf(w, "%s; %s\n", what, costLine(p.Cost, r.info))
	if p.Cost.Method == "scan" {
		fmt.Fprintln(w, "(a scan returns items in table order, not by time)")
	}
	if p.Next != "" {
		fmt.Fprintf(w, "more: repeat with --cursor %s\n", p.Next)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (r *runner) stats(ctx context.Context, args []string) error {
	fs := r.flags()
	var l listFlags
	l.register(fs, false)
	l.since = "24h"
	fs.Lookup("since").DefValue = "24h"
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("stats takes flags only, got %q", pos)
	}
	now := r.env.Now()
	l.limit, l.status = 1000, "failed"
	if l.scan {
		l.status = "all"
	}
	q, err := l.query(now)
	if err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	counts := map[Count]int{}
	var cost ddbstore.Cost
	// The same listing as list, paged to its end: records, then poison notes.
	for _, poison := range []bool{false, true} {
		q.Poison, q.Cursor = poison, ""
		for {
			p, err := r.admin.List(ctx, q)
			if err != nil {
				return err
			}
			cost.Add(p.Cost)
			for _, rec := range p.Records {
				counts[Count{Status: string(rec.Status), Code: rec.ErrorCode}]++
			}
			for _, n := range p.Poison {
				counts[Count{Status: ddbstore.StatusPoison, Code: n.Reason}]++
			}
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
	}
	out := StatsView{Since: q.Since.UTC(), Until: now.UTC(), Counts: []Count{}, Cost: cost}
	if !q.Until.IsZero() {
		out.Until = q.Until.UTC()
	}
	for c, n := range counts {
		c.Count = n
		out.Counts = append(out.Counts, c)
	}
	slices.SortFunc(out.Counts, func(a, b Count) int {
		return strings.Compare(a.Status+" "+string(a.Code), b.Status+" "+string(b.Code))
	})
	if !l.scan && r.info.Indexed {
		out.NotCounted = []idem.Status{idem.StatusInProgress, idem.StatusSucceeded}
	}
	if r.json {
		return r.printJSON(out)
	}
	w := r.env.Stdout
	fmt.Fprintf(w, "from %s to %s\n", out.Since.Format(time.RFC3339), out.Until.Format(time.RFC3339))
	t := newTable(w)
	t.row("STATUS", "CODE", "COUNT")
	total := 0
	for _, c := range out.Counts {
		t.row(c.Status, dash(string(c.Code)), strconv.Itoa(c.Count))
		total += c.Count
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "total %d; %s\n", total, costLine(cost, r.info))
	if len(out.NotCounted) > 0 {
		fmt.Fprintln(w, "IN_PROGRESS and SUCCEEDED records are not in the index and not counted: --scan counts them, reading the whole table")
	}
	return nil
}

// writeFlags are the flags of release and forget.
type writeFlags struct {
	keyFlags
	reason, token string
	force         bool
	dryRun, stdin bool
}

// targets are the records a write names, each with what the operator saw
// of it (nil: nothing; the record read now is what is judged).
type target struct {
	key  string
	seen *idem.Record
}

func (r *runner) targets(w writeFlags, pos []string, keyExpr string) ([]target, error) {
	if w.stdin {
		if len(pos) > 0 || w.id != "" || w.apiKey != "" || w.body != "" || w.token != "" {
			return nil, usagef("--stdin takes the records from list --json (or get --json); name no others")
		}
		return r.readTargets(r.env.Stdin)
	}
	keys, err := r.keys(w.keyFlags, pos, keyExpr)
	if err != nil {
		return nil, err
	}
	if w.token != "" && len(keys) != 1 {
		return nil, usagef("--token names what you saw of one record; got %d keys", len(keys))
	}
	var out []target
	for _, k := range keys {
		t := target{key: k.key}
		if w.token != "" {
			t.seen = &idem.Record{Token: w.token}
		}
		out = append(out, t)
	}
	return out, nil
}

// readTargets reads list --json (or get --json) output.
func (r *runner) readTargets(in io.Reader) ([]target, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, usagef("--stdin: not the JSON of list --json or get --json: %v", err)
	}
	var views []RecordView
	switch {
	case probe["records"] != nil:
		var lv ListView
		if err := json.Unmarshal(data, &lv); err != nil {
			return nil, usagef("--stdin: %v", err)
		}
		views = lv.Records
	case probe["record"] != nil:
		var gv GetView
		if err := json.Unmarshal(data, &gv); err != nil {
			return nil, usagef("--stdin: %v", err)
		}
		views = []RecordView{*gv.Record}
	default:
		return nil, usagef("--stdin: no \"records\" (list --json) or \"record\" (get --json) in the input")
	}
	var out []target
	for _, v := range views {
		rec, err := v.Record()
		if err != nil {
			return nil, usagef("--stdin: %v", err)
		}
		if err := idem.ValidateKey(rec.Key); err != nil {
			return nil, usagef("--stdin: malformed key %q", rec.Key)
		}
		out = append(out, target{key: rec.Key, seen: &rec})
	}
	return out, nil
}

// changed says how cur differs from what the operator saw, or "".
func changed(seen *idem.Record, cur idem.Record) string {
	switch {
	case seen == nil:
		return ""
	case seen.Token != cur.Token:
		return "it changed hands since you read it (another token)"
	case seen.Status != "" && seen.Status != cur.Status:
		return fmt.Sprintf("it is %s now, not %s as you read it", cur.Status, seen.Status)
	case seen.Status != "" && seen.Attempts != cur.Attempts:
		return fmt.Sprintf("it has %d attempts now, not %d as you read it", cur.Attempts, seen.Attempts)
	}
	return ""
}

func was(rec idem.Record) string {
	s := string(rec.Status)
	if rec.ErrorCode != "" {
		s += " " + string(rec.ErrorCode)
	}
	return s + ", " + plural(rec.Attempts, "attempt", "attempts")
}

func (r *runner) release(ctx context.Context, args []string) error {
	return r.write(ctx, args, true)
}

func (r *runner) forget(ctx context.Context, args []string) error {
	return r.write(ctx, args, false)
}

// write runs release (or forget) over every named record, each one a
// compare-and-swap on what was read.
func (r *runner) write(ctx context.Context, args []string, release bool) error {
	fs := r.flags()
	var w writeFlags
	w.register(fs)
	fs.StringVar(&w.reason, "reason", "", "why: kept in the record's audit and logged (required for forget and --force)")
	fs.StringVar(&w.token, "token", "", "the token you saw (get prints it): refuse if the record changed hands since")
	fs.BoolVar(&w.dryRun, "dry-run", false, "say what would be done, write nothing")
	fs.BoolVar(&w.stdin, "stdin", false, "take the records from list --json (or get --json) on stdin, refusing any that changed since")
	if release {
		fs.BoolVar(&w.force, "force", false, "release an IN_PROGRESS record whose lease is live (needs --reason): its owner's completion is then refused, and its side effect may happen twice")
	}
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	op := "release"
	switch {
	case !release && strings.TrimSpace(w.reason) == "":
		return usagef("forget needs --reason: it is kept in a note with who deleted the record")
	case w.force && strings.TrimSpace(w.reason) == "":
		return usagef("--force needs --reason: it takes the key from a live owner, whose side effect may then happen twice")
	case !release:
		op = "forget"
	case w.force:
		op = "release --force"
	}
	s, err := r.resolve()
	if err != nil {
		return err
	}
	targets, err := r.targets(w, pos, s.KeyExpr.Value)
	if err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	out := ResultsView{DryRun: w.dryRun, Reason: w.reason, Results: []ResultView{}}
	if !w.dryRun {
		out.By = r.who(ctx)
	}
	refused, missing := 0, 0
	for _, t := range targets {
		res, err := r.writeOne(ctx, t, w, op, out.By, release)
		if err != nil {
			r.printResults(out)
			return fmt.Errorf("%s: %w", t.key, err)
		}
		switch res.Outcome {
		case "refused":
			refused++
		case "not_found":
			missing++
		}
		out.Results = append(out.Results, res)
	}
	if err := r.printResults(out); err != nil {
		return err
	}
	switch {
	case refused > 0:
		r.exit = ExitRefused
	case missing > 0:
		r.exit = ExitNotFound
	}
	return nil
}

func (r *runner) writeOne(ctx context.Context, t target, w writeFlags, op, by string, release bool) (ResultView, error) {
	now := r.env.Now()
	res := ResultView{Key: t.key}
	cur, found, err := r.admin.Get(ctx, t.key, now)
	if err != nil {
		return res, err
	}
	if !found {
		res.Outcome, res.Detail = "not_found", "no record (or it expired)"
		return res, nil
	}
	v := view(cur, now)
	res.Record = &v
	if why := changed(t.seen, cur); why != "" {
		res.Outcome, res.Detail = "refused", why+"; read it again (get, or list --json) and decide again"
		return res, nil
	}
	rule := cur.Forgettable(now)
	if release {
		rule = cur.Releasable(now, w.force)
	}
	switch {
	case errors.Is(rule, idem.ErrLeaseLive) && release:
		res.Outcome, res.Detail = "refused", rule.Error()+": an owner may still be running the action; --force --reason takes the key from it (its completion is then refused, and its side effect may happen twice)"
		return res, nil
	case errors.Is(rule, idem.ErrLeaseLive):
		res.Outcome, res.Detail = "refused", rule.Error()+": an owner may still be running the action; wait for the lease to end"
		return res, nil
	case errors.Is(rule, idem.ErrNotReleasable):
		res.Outcome, res.Detail = "refused", rule.Error()+": release only makes failed or abandoned events run again; forget deletes a record"
		return res, nil
	case rule != nil:
		res.Outcome, res.Detail = "refused", rule.Error()
		return res, nil
	}
	if w.dryRun {
		res.Outcome, res.Detail = "would_"+strings.Fields(op)[0], "was "+was(cur)
		return res, nil
	}
	audit, err := appendAudit(cur.Audit, AuditEntry{At: now.UTC(), By: by, Op: op, Reason: w.reason, Was: was(cur)})
	if err != nil {
		return res, err
	}
	var after idem.Record
	var ok bool
	if release {
		after, ok, err = r.admin.Release(ctx, cur, idem.Release{Token: r.newToken(), Now: now, Force: w.force, Audit: audit})
	} else {
		after, ok, err = r.admin.Forget(ctx, cur, idem.Forget{Token: r.newToken(), Now: now, Audit: audit})
	}
	if err != nil {
		return res, err
	}
	if !ok {
		// Lost a race: the record changed between our read and our write.
		res.Outcome = "refused"
		if after.Key == "" {
			res.Outcome, res.Detail, res.Record = "not_found", "the record went away while we wrote", nil
		} else {
			av := view(after, now)
			res.Record = &av
			res.Detail = "the record changed while we wrote (" + was(after) + "); read it again and decide again"
		}
		return res, nil
	}
	r.log.Info("oncelyctl "+op, "key", t.key, "namespace", r.admin.Namespace(), "table", r.admin.Table(), "by", by, "reason", w.reason, "was", was(cur))
	if release {
		av := view(after, now)
		res.Outcome, res.Detail, res.Record = "released", "was "+was(cur), &av
	} else {
		res.Outcome, res.Detail = "forgotten", "was "+was(cur)
	}
	return res, nil
}

func (r *runner) printResults(out ResultsView) error {
	if r.json {
		return r.printJSON(out)
	}
	t := newTable(r.env.Stdout)
	for _, res := range out.Results {
		t.row(strings.ReplaceAll(res.Outcome, "_", " "), res.Key, res.Detail)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if out.DryRun {
		fmt.Fprintln(r.env.Stdout, "dry run: nothing written")
	}
	return nil
}

package opsctl

import (
	"bytes"
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

	"github.com/oncely/oncely/apigw"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
)

func (r *runner) get(ctx context.Context, args []string) error {
	key, err := r.oneKey(args)
	if err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	now := r.env.Now()
	rec, found, err := r.admin.Inspect(ctx, key.key)
	if err != nil {
		return err
	}
	out, err := r.getView(ctx, key, rec, found, now)
	if err != nil {
		return err
	}
	if err := r.printGet(out, rec, now); err != nil {
		return err
	}
	switch {
	case !found:
		msg := fmt.Sprintf("no record for key %q in namespace %q of table %q", key.key, r.admin.Namespace(), r.admin.Table())
		if key.hint != "" {
			msg += " (" + key.hint + ")"
		}
		return &exitError{code: ExitNotFound, msg: msg}
	case rec.Expired(now):
		return &exitError{code: ExitNotFound, msg: fmt.Sprintf("the record for key %q expired at %s: the function treats it as absent", key.key, rec.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// oneKey reads get's flags and arguments: one record, named in any of the
// ways keys takes.
func (r *runner) oneKey(args []string) (named, error) {
	fs := r.flags()
	var k keyFlags
	k.register(fs)
	pos, err := r.parse(fs, args)
	if err != nil {
		return named{}, err
	}
	s, err := r.resolve()
	if err != nil {
		return named{}, err
	}
	keys, err := r.keys(k, pos, s)
	if err != nil {
		return named{}, err
	}
	if len(keys) != 1 {
		return named{}, usagef("get takes one key, got %d", len(keys))
	}
	return keys[0], nil
}

// getView is what get shows of key: the stored record (found: Inspect
// found one, expired or not) and whether the body named matches it, or
// else the record's forget note, if there is one.
func (r *runner) getView(ctx context.Context, key named, rec idem.Record, found bool, now time.Time) (GetView, error) {
	out := GetView{Key: key.key, Found: found && !rec.Expired(now)}
	if found {
		v := view(rec, now)
		out.Record = &v
		if key.fingerprint != "" {
			match := key.fingerprint == rec.Fingerprint
			out.PayloadMatches = &match
		}
		return out, nil
	}
	note, ok, err := r.admin.GetForgotten(ctx, key.key, now)
	if err != nil || !ok {
		return out, err
	}
	fv := ForgottenView{Status: note.Status, ErrorCode: note.ErrorCode, Fingerprint: note.Fingerprint, Attempts: note.Attempts, At: note.At.UTC()}
	_ = json.Unmarshal([]byte(note.Audit), &fv.Audit)
	out.Forgotten = &fv
	return out, nil
}

// printGet prints get's view: as JSON, or for people the record and what
// the body's fingerprint means for it, or the forget note.
func (r *runner) printGet(out GetView, rec idem.Record, now time.Time) error {
	w := r.env.Stdout
	switch {
	case r.json:
		return r.printJSON(out)
	case out.Record != nil:
		if err := printRecord(w, rec, now); err != nil {
			return err
		}
		switch {
		case out.PayloadMatches != nil && *out.PayloadMatches:
			fmt.Fprintln(w, "payload      the body's fingerprint matches the stored one")
		case out.PayloadMatches != nil && rec.Status == idem.StatusSucceeded:
			// Forgetting a success runs its action again: say so where the
			// advice is given, not only when the forget is refused.
			fmt.Fprintln(w, "payload      DIFFERS from the stored fingerprint: the function refuses this body as KEY_REUSED; the stored event SUCCEEDED, "+
				"so running this one means running the action again (forget --rerun-succeeded)")
		case out.PayloadMatches != nil:
			fmt.Fprintln(w, "payload      DIFFERS from the stored fingerprint: the function refuses this body as KEY_REUSED (forget the record to let it run)")
		}
	case out.Forgotten != nil:
		fmt.Fprintf(w, "%s: no record; forgotten %s (it was %s %s, %s)\n", out.Key, stamp(out.Forgotten.At, now),
			out.Forgotten.Status, out.Forgotten.ErrorCode, plural(out.Forgotten.Attempts, "attempt", "attempts"))
		for _, e := range out.Forgotten.Audit {
			fmt.Fprintln(w, "  "+auditLine(e))
		}
	}
	return nil
}

// listFlags are the filters of list and stats.
type listFlags struct {
	status, code, reason, since, until, cursor string
	poison, scan                               bool
	limit                                      int
	fs                                         *flag.FlagSet // which were given
}

// statusFilter is one word list --status takes: a state, or a group of
// states of one stored status.
type statusFilter struct {
	word   string
	status idem.Status // "" for all
	state  string      // one state; "" for the whole group
}

// statusFilters are the words of list --status, in the vocabulary of the
// STATE column (see States).
var statusFilters = []statusFilter{
	{"failed", idem.StatusFailed, ""},
	{StatePermanent, idem.StatusFailed, StatePermanent},
	{StateRetryable, idem.StatusFailed, StateRetryable},
	{StateReleased, idem.StatusFailed, StateReleased},
	{"in_progress", idem.StatusInProgress, ""},
	{StateRunning, idem.StatusInProgress, StateRunning},
	{StateAbandoned, idem.StatusInProgress, StateAbandoned},
	{StateSucceeded, idem.StatusSucceeded, ""},
	{"all", "", ""},
}

func statusWords() string {
	var w []string
	for _, f := range statusFilters {
		w = append(w, f.word)
	}
	return strings.Join(w, ", ")
}

func (l *listFlags) register(fs *flag.FlagSet, paging bool) {
	l.fs = fs
	if paging {
		fs.StringVar(&l.status, "status", "failed", "a state ("+statusWords()+"); failed and its states are indexed, the others scan the table")
		fs.StringVar(&l.code, "code", "", "only failures with this error code, any case (HTTP_422, RETRY_EXHAUSTED, RELEASED, ...)")
		fs.BoolVar(&l.poison, "poison", false, "list poison notes instead of records")
		fs.StringVar(&l.reason, "reason", "", "with --poison: only notes with this reason, any case ("+codeList(idem.PoisonReasons)+")")
		fs.IntVar(&l.limit, "limit", ddbstore.DefaultListLimit, "at most this many items (1 to 1000); --cursor pages on")
		fs.StringVar(&l.cursor, "cursor", "", "continue a listing: the cursor the previous page printed")
	}
	fs.StringVar(&l.since, "since", "", "only items written since: a duration before now (24h) or an RFC 3339 time")
	fs.StringVar(&l.until, "until", "", "only items written until: a duration before now or an RFC 3339 time")
	fs.BoolVar(&l.scan, "scan", false, "read with a Scan of the whole table even where the index serves (costs the whole table)")
}

func codeList(codes []idem.Code) string {
	var s []string
	for _, c := range codes {
		s = append(s, string(c))
	}
	return strings.Join(s, ", ")
}

// query turns the flags into a listing query, checking them against the
// vocabulary (idem's codes, notify's HTTP_<status>, idem's poison reasons,
// the states) before anything is read: a filter that can match nothing is
// refused, not answered with an empty listing that reads as "nothing
// failed". An unknown failure code is only warned about: an action may
// store codes of its own.
func (l *listFlags) query(now time.Time, warn io.Writer) (ddbstore.Query, error) {
	q := ddbstore.Query{Poison: l.poison, Scan: l.scan, Limit: l.limit, Cursor: l.cursor, Now: now}
	code := idem.Code(strings.ToUpper(strings.TrimSpace(l.code)))
	reason := idem.Code(strings.ToUpper(strings.TrimSpace(l.reason)))
	statusGiven := l.fs.Lookup("status") != nil && set(l.fs, "status")
	switch {
	case l.poison && code != "":
		return q, usagef("--code selects records; with --poison, use --reason")
	case l.poison && statusGiven:
		return q, usagef("--status selects records; poison notes have no status (drop --status, or --poison)")
	case !l.poison && reason != "":
		return q, usagef("--reason selects poison notes: add --poison, or use --code for records")
	case l.poison && reason != "" && !slices.Contains(idem.PoisonReasons, reason):
		return q, usagef("--reason %q: poison notes have %s", l.reason, codeList(idem.PoisonReasons))
	case l.poison:
		q.Code = reason
	}
	if !l.poison {
		f, err := l.statusFilter()
		if err != nil {
			return q, err
		}
		q.Status = f.status
		if f.state != "" {
			want := f.state
			q.Keep = func(rec idem.Record) bool { return state(rec, now) == want }
		}
		if code != "" {
			switch {
			case f.status == idem.StatusInProgress || f.status == idem.StatusSucceeded:
				return q, usagef("--code selects failures: --status %s records have no code", f.word)
			case f.state == StateReleased && code != idem.CodeReleased:
				return q, usagef("--status released records have code %s, not %s", idem.CodeReleased, code)
			case (f.state == StatePermanent || f.state == StateRetryable) && code == idem.CodeReleased:
				return q, usagef("--code %s: a released record's state is released, not %s (use --status released)", code, f.state)
			case !slices.Contains(idem.Codes, code) && !notify.IsStatusCode(code):
				fmt.Fprintf(warn, "oncelyctl: warning: --code %q is neither HTTP_<status> nor one of oncely's codes (%s): listing it anyway, as an action may store codes of its own\n",
					l.code, codeList(idem.Codes))
			}
			q.Code = code
		}
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

// statusFilter reads --status, in any case.
func (l *listFlags) statusFilter() (statusFilter, error) {
	w := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(l.status)), "-", "_")
	if w == "" {
		w = "failed"
	}
	for _, f := range statusFilters {
		if f.word == w {
			return f, nil
		}
	}
	if w == StateExpired {
		return statusFilter{}, usagef("--status expired: expired records count as absent and are never listed; get KEY shows one")
	}
	return statusFilter{}, usagef("--status %q: want a state (%s)", l.status, statusWords())
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
	q, err := l.query(now, r.env.Stderr)
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
	if len(p.Records)+len(p.Poison) == 0 && q.Cursor == "" {
		if err := r.namespaceHint(ctx); err != nil {
			return err
		}
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
	return r.printList(p, q, now)
}

// printList prints a page of list for people: a table, what it cost, and
// where to look for what it cannot show.
func (r *runner) printList(p ddbstore.Page, q ddbstore.Query, now time.Time) error {
	w := r.env.Stdout
	t := newTable(w)
	if q.Poison {
		t.row("AT (UTC)", "MESSAGE ID", "KEY", "REASON", "BODY", "DETAIL")
		for _, n := range p.Poison {
			t.row(n.At.UTC().Format("2006-01-02T15:04:05Z"), n.ID, dash(n.Key), string(n.Reason), fmt.Sprintf("%d bytes, sha256 %.12s…", n.BodySize, n.BodySHA256), short(n.Detail, 60))
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
	if !q.Poison && q.Status == idem.StatusFailed && q.Keep == nil && q.Code == "" && p.Cost.Method == "query" {
		// The default view: say where what it cannot show is.
		fmt.Fprintln(w, abandonedHint)
	}
	if p.Next != "" {
		fmt.Fprintf(w, "more: repeat with --cursor %s\n", p.Next)
	}
	return nil
}

// abandonedHint says where stuck events are, under the views that cannot
// show them: the index holds failures only (indexing in-progress records
// would charge every event an index write), so finding them is a scan.
const abandonedHint = "stuck events (abandoned: IN_PROGRESS, lease ended) are not in the index: `oncelyctl list --status abandoned` lists them, scanning the whole table"

// namespaceHint warns, after a listing found nothing, when the namespace
// came from --namespace, is not the configuration's, and has nothing at
// all in the triage index: most likely a typo, which an empty listing
// would pass off as "nothing failed". It reads at most one item per index
// shard, never the table.
func (r *runner) namespaceHint(ctx context.Context) error {
	s := r.settings
	if s.Namespace.Source != "--namespace" || s.Namespace.Value == s.configuredNamespace.Value || !r.info.Indexed {
		return nil
	}
	any, _, err := r.admin.HasIndexEntries(ctx)
	if err != nil || any {
		return err
	}
	configured := "none is configured ($" + config.EnvNamespace + " and $" + config.EnvFunctionName + " are unset)"
	if s.configuredNamespace.Value != "" {
		configured = fmt.Sprintf("the configuration's is %q (from %s)", s.configuredNamespace.Value, s.configuredNamespace.Source)
	}
	fmt.Fprintf(r.env.Stderr, "oncelyctl: hint: namespace %q (from --namespace) has no failure and no poison note at all in table %q's index; %s: is it mistyped? (oncelyctl config)\n",
		s.Namespace.Value, r.admin.Table(), configured)
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
	q, err := l.query(now, r.env.Stderr)
	if err != nil {
		return err
	}
	if err := r.connect(ctx); err != nil {
		return err
	}
	// Where the read is a scan anyway (--scan, or a table without the
	// index), one scan counts every record and note: the table is read once.
	// Otherwise the index's failures, then its poison notes.
	reads := []ddbstore.Query{q, q}
	reads[1].Poison = true
	if l.scan || !r.info.Indexed {
		q.Status, q.WithPoison, q.Scan = "", true, true
		reads = []ddbstore.Query{q}
	}
	counts, cost, err := r.count(ctx, reads, now)
	if err != nil {
		return err
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
		return strings.Compare(a.Status+" "+a.State+" "+string(a.Code), b.Status+" "+b.State+" "+string(b.Code))
	})
	if len(reads) == 2 {
		out.NotCounted = []string{StateRunning, StateAbandoned, StateSucceeded}
	}
	if r.json {
		return r.printJSON(out)
	}
	return r.printStats(out)
}

// count pages through each listing in reads to its end, counting records
// by status, state and code, and poison notes by reason.
func (r *runner) count(ctx context.Context, reads []ddbstore.Query, now time.Time) (map[Count]int, ddbstore.Cost, error) {
	counts := map[Count]int{}
	var cost ddbstore.Cost
	for _, q := range reads {
		for {
			p, err := r.admin.List(ctx, q)
			if err != nil {
				return nil, cost, err
			}
			cost.Add(p.Cost)
			for _, rec := range p.Records {
				counts[Count{Status: string(rec.Status), State: state(rec, now), Code: rec.ErrorCode}]++
			}
			for _, n := range p.Poison {
				counts[Count{Status: ddbstore.StatusPoison, State: StatePoison, Code: n.Reason}]++
			}
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
	}
	return counts, cost, nil
}

// printStats prints stats for people.
func (r *runner) printStats(out StatsView) error {
	w := r.env.Stdout
	fmt.Fprintf(w, "from %s to %s\n", out.Since.Format(time.RFC3339), out.Until.Format(time.RFC3339))
	t := newTable(w)
	t.row("STATUS", "STATE", "CODE", "COUNT")
	total := 0
	for _, c := range out.Counts {
		t.row(c.Status, c.State, dash(string(c.Code)), strconv.Itoa(c.Count))
		total += c.Count
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "total %d; %s\n", total, costLine(out.Cost, r.info))
	if len(out.NotCounted) > 0 {
		fmt.Fprintln(w, "running, abandoned and succeeded records are not in the index and not counted: stats --scan counts them, reading the whole table")
		fmt.Fprintln(w, abandonedHint)
	}
	return nil
}

// writeFlags are the flags of release and forget.
type writeFlags struct {
	keyFlags
	reason, token  string
	force          bool
	rerunSucceeded bool
	mayRepeat      bool // --may-repeat-side-effect
	dryRun, stdin  bool
}

// flagMayRepeat consents to releasing or forgetting an OUTCOME_UNKNOWN
// failure, named for what it risks.
const flagMayRepeat = "may-repeat-side-effect"

func (w *writeFlags) register(fs *flag.FlagSet, release bool) {
	w.keyFlags.register(fs)
	fs.StringVar(&w.reason, "reason", "", "why: kept in the record's audit and logged (required for forget, --force and --"+flagMayRepeat+", but for a dry run)")
	fs.StringVar(&w.token, "token", "", "the token you saw (get prints it): refuse if the record changed hands since")
	fs.BoolVar(&w.dryRun, "dry-run", false, "say what would be done, write nothing")
	fs.BoolVar(&w.stdin, "stdin", false, "take the records from list --json (or get --json) on stdin, refusing any that changed since")
	verb := "forget"
	if release {
		verb = "release"
		fs.BoolVar(&w.force, "force", false, "release an IN_PROGRESS record whose lease is live (needs --reason): its owner's completion is then refused, and its side effect may happen twice")
	} else {
		fs.BoolVar(&w.rerunSucceeded, "rerun-succeeded", false, "forget SUCCEEDED records too: the next delivery of each runs its action again, a second side effect (without it, they are refused)")
	}
	fs.BoolVar(&w.mayRepeat, flagMayRepeat, false, verb+" OUTCOME_UNKNOWN failures too (needs --reason): each sent its side effect and never learnt whether it happened, so the next delivery may do it a second time; check the downstream first (without it, they are refused)")
}

// op names the write for the audit and the log (release, release --force,
// release --may-repeat-side-effect, forget), refusing a forget, a forced
// release or a consent to repeat a side effect without a reason.
func (w *writeFlags) op(release bool) (string, error) {
	switch {
	case !release && !w.dryRun && strings.TrimSpace(w.reason) == "":
		return "", usagef("forget needs --reason: it is kept in a note with who deleted the record (a --dry-run does not need one)")
	case w.force && !w.dryRun && strings.TrimSpace(w.reason) == "":
		return "", usagef("--force needs --reason: the side effect of what it releases may then happen twice")
	case w.mayRepeat && !w.dryRun && strings.TrimSpace(w.reason) == "":
		return "", usagef("--%s needs --reason: the side effect of what it releases may then happen twice", flagMayRepeat)
	case !release:
		return "forget", nil
	}
	op := "release"
	if w.force {
		op += " --force"
	}
	if w.mayRepeat {
		op += " --" + flagMayRepeat
	}
	return op, nil
}

// targets are the records a write names, each with what the operator saw
// of it (nil: nothing; the record read now is what is judged).
type target struct {
	key  string
	seen *idem.Record
}

func (r *runner) targets(w writeFlags, pos []string, s settings) ([]target, error) {
	if w.stdin {
		if len(pos) > 0 || w.id != "" || w.apiKey != "" || w.body != "" || w.token != "" {
			return nil, usagef("--stdin takes the records from list --json (or get --json); name no others")
		}
		recs, err := ReadRecords(r.env.Stdin)
		if err != nil {
			return nil, usagef("--stdin: %v", err)
		}
		var out []target
		for i := range recs {
			out = append(out, target{key: recs[i].Key, seen: &recs[i]})
		}
		return out, nil
	}
	keys, err := r.keys(w.keyFlags, pos, s)
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

// maxStdin bounds what release and forget read with --stdin: far more than
// a thousand records of list --json.
const maxStdin = 64 << 20

// ReadRecords reads what release --stdin and forget --stdin take: one or
// more JSON documents, each the output of list --json (its "records") or
// get --json (its "record"), so that pages of a listing can be piped in
// one after another. It returns the records as the operator saw them, in
// order. Anything else is an error that says what was wrong, never a
// panic: a document without records, a null record, a malformed or
// repeated key, a status oncely does not write, more than 64 MiB.
func ReadRecords(in io.Reader) ([]idem.Record, error) {
	data, err := io.ReadAll(io.LimitReader(in, maxStdin+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxStdin {
		return nil, fmt.Errorf("more than %d bytes; page the listing (--limit, --cursor)", maxStdin)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []idem.Record
	seen := map[string]bool{}
	for doc := 1; ; doc++ {
		var probe map[string]json.RawMessage
		if err := dec.Decode(&probe); errors.Is(err, io.EOF) {
			if doc == 1 {
				return nil, errors.New("no input: pipe in the JSON of list --json or get --json")
			}
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d is not the JSON of list --json or get --json: %v", doc, err)
		}
		views, err := documentViews(doc, probe)
		if err != nil {
			return nil, err
		}
		for i, v := range views {
			rec, err := recordOf(doc, i, v)
			if err != nil {
				return nil, err
			}
			if seen[rec.Key] {
				return nil, fmt.Errorf("record %q appears twice", rec.Key)
			}
			seen[rec.Key] = true
			out = append(out, rec)
		}
	}
}

// documentViews are the records of one document of ReadRecords' input, the
// doc-th: list --json's "records" or get --json's "record".
func documentViews(doc int, probe map[string]json.RawMessage) ([]RecordView, error) {
	switch {
	case probe["records"] != nil:
		var views []RecordView
		if err := json.Unmarshal(probe["records"], &views); err != nil {
			return nil, fmt.Errorf("document %d: \"records\": %v", doc, err)
		}
		return views, nil
	case probe["record"] != nil:
		var rv *RecordView
		if err := json.Unmarshal(probe["record"], &rv); err != nil {
			return nil, fmt.Errorf("document %d: \"record\": %v", doc, err)
		}
		if rv == nil {
			return nil, fmt.Errorf("document %d: \"record\" is null: get --json found no record", doc)
		}
		return []RecordView{*rv}, nil
	case probe["found"] != nil:
		return nil, fmt.Errorf("document %d: get --json found no record to act on", doc)
	}
	return nil, fmt.Errorf("document %d has no \"records\" (list --json) or \"record\" (get --json)", doc)
}

// recordOf is the record a view of document doc shows, at index i, if its
// key is well formed and its status one oncely writes.
func recordOf(doc, i int, v RecordView) (idem.Record, error) {
	rec, err := v.Record()
	if err != nil {
		return idem.Record{}, fmt.Errorf("document %d, record %d: %v", doc, i+1, err)
	}
	if err := idem.ValidateKey(rec.Key); err != nil {
		return idem.Record{}, fmt.Errorf("document %d, record %d: malformed key %q", doc, i+1, rec.Key)
	}
	switch rec.Status {
	case idem.StatusInProgress, idem.StatusSucceeded, idem.StatusFailed:
		return rec, nil
	}
	return idem.Record{}, fmt.Errorf("document %d, record %q: status %q is none of IN_PROGRESS, SUCCEEDED, FAILED", doc, rec.Key, rec.Status)
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
	w.register(fs, release)
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	op, err := w.op(release)
	if err != nil {
		return err
	}
	s, err := r.resolve()
	if err != nil {
		return err
	}
	targets, err := r.targets(w, pos, s)
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
	res.RerunsSuccess = !release && cur.Status == idem.StatusSucceeded
	// A permanent failure was acknowledged: its message has left the
	// queue, and a release alone runs nothing (an API caller retries by
	// itself).
	res.Resend = release && cur.Status == idem.StatusFailed && !cur.Retryable && !apigw.IsScopedKey(cur.Key)
	if why := changed(t.seen, cur); why != "" {
		res.Outcome, res.Detail = "refused", why+"; read it again (get, or list --json) and decide again"
		return res, nil
	}
	rule := idem.Forgettable(cur, idem.Forget{Now: now, RerunSucceeded: w.rerunSucceeded, MayRepeatSideEffect: w.mayRepeat})
	if release {
		rule = idem.Releasable(cur, idem.Release{Now: now, Force: w.force, MayRepeatSideEffect: w.mayRepeat})
	}
	if refused(&res, rule, w, release, cur) {
		return res, nil
	}
	again := ""
	if res.RerunsSuccess {
		again = "; its next delivery runs the action AGAIN"
	}
	if w.dryRun {
		res.Outcome, res.Detail = "would_"+strings.Fields(op)[0], "was "+was(cur)+again
		return res, nil
	}
	after, ok, err := r.apply(ctx, cur, w, op, by, now, release)
	if err != nil {
		return res, err
	}
	if !ok {
		lostRace(&res, after, now)
		return res, nil
	}
	r.log.Info("oncelyctl "+op, "key", t.key, "namespace", r.admin.Namespace(), "table", r.admin.Table(), "by", by, "reason", w.reason, "was", was(cur), "reruns_success", res.RerunsSuccess)
	if release {
		av := view(after, now)
		res.Outcome, res.Detail, res.Record = "released", "was "+was(cur), &av
	} else {
		res.Outcome, res.Detail = "forgotten", "was "+was(cur)+again
	}
	return res, nil
}

// refused fills in res when the rule (cur.Releasable or cur.Forgettable)
// refuses the write, or finds it done already, and reports whether it did.
// A refusal names the flag that consents to it, and says so when another
// consent was given instead.
func refused(res *ResultView, rule error, w writeFlags, release bool, cur idem.Record) bool {
	switch {
	case rule == nil:
		return false
	case errors.Is(rule, idem.ErrLeaseLive) && release:
		res.Outcome, res.Detail = "refused", rule.Error()+": an owner may still be running the action; --force --reason takes the key from it (its completion is then refused, and its side effect may happen twice)"
	case errors.Is(rule, idem.ErrLeaseLive):
		res.Outcome, res.Detail = "refused", rule.Error()+": an owner may still be running the action; wait for the lease to end"
	case errors.Is(rule, idem.ErrNotReleasable):
		res.Outcome, res.Detail = "refused", rule.Error()+": its action ran, and release never runs it again; forget --rerun-succeeded deletes the record so that its next delivery runs the action a second time"
	case errors.Is(rule, idem.ErrOutcomeUnknown):
		verb, other := "forgetting", ""
		switch {
		case release && w.force:
			verb, other = "releasing", "; --force takes a live lease and is no consent to this"
		case release:
			verb = "releasing"
		case w.rerunSucceeded:
			other = "; --rerun-succeeded re-runs a SUCCEEDED record and is no consent to this"
		}
		res.Outcome, res.Detail = "refused", "OUTCOME_UNKNOWN: its action sent the side effect and never learnt whether it happened; "+verb+
			" it lets the next delivery send it again, perhaps a second time"+other+": check the downstream first, then add --"+flagMayRepeat+" --reason to do that on purpose"
	case errors.Is(rule, idem.ErrRerunsSuccess):
		res.Outcome, res.Detail = "refused", "SUCCEEDED: its action ran; forgetting it lets its next delivery run the action AGAIN (a second side effect): add --rerun-succeeded to do that on purpose"
	case errors.Is(rule, idem.ErrAlreadyReleased):
		// Idempotent: the release already made the next delivery run it.
		res.Outcome, res.Detail, res.Resend = "already_released", "released already"+lastAudit(cur)+"; its next delivery runs the action; nothing written", false
	default:
		res.Outcome, res.Detail = "refused", rule.Error()
	}
	return true
}

// lostRace fills in res for a write whose compare-and-swap failed: the
// record changed between our read and our write, to after (zero: gone).
func lostRace(res *ResultView, after idem.Record, now time.Time) {
	res.Outcome, res.Resend = "refused", false
	if after.Key == "" {
		res.Outcome, res.Detail, res.Record = "not_found", "the record went away while we wrote", nil
		return
	}
	av := view(after, now)
	res.Record = &av
	res.Detail = "the record changed while we wrote (" + was(after) + "); read it again and decide again"
}

// apply writes the release or forget of cur, fenced on cur, with an audit
// entry for it appended to cur's.
func (r *runner) apply(ctx context.Context, cur idem.Record, w writeFlags, op, by string, now time.Time, release bool) (idem.Record, bool, error) {
	audit, err := appendAudit(cur.Audit, AuditEntry{At: now.UTC(), By: by, Op: op, Reason: w.reason, Was: was(cur)})
	if err != nil {
		return idem.Record{}, false, err
	}
	if release {
		return r.admin.Release(ctx, cur, idem.Release{Token: r.newToken(), Now: now, Force: w.force, MayRepeatSideEffect: w.mayRepeat, Audit: audit})
	}
	return r.admin.Forget(ctx, cur, idem.Forget{Token: r.newToken(), Now: now, Audit: audit, RerunSucceeded: w.rerunSucceeded, MayRepeatSideEffect: w.mayRepeat})
}

// lastAudit says who did the record's last operator change, if its audit
// says.
func lastAudit(rec idem.Record) string {
	v := view(rec, time.Time{})
	if len(v.Audit) == 0 {
		return ""
	}
	e := v.Audit[len(v.Audit)-1]
	s := " by " + e.By + " at " + e.At.UTC().Format(time.RFC3339)
	if e.Reason != "" {
		s += fmt.Sprintf(" (%q)", e.Reason)
	}
	return s
}

func (r *runner) printResults(out ResultsView) error {
	if r.json {
		return r.printJSON(out)
	}
	t := newTable(r.env.Stdout)
	reruns, resend := 0, 0
	for _, res := range out.Results {
		t.row(strings.ReplaceAll(res.Outcome, "_", " "), res.Key, res.Detail)
		if res.RerunsSuccess && res.Outcome != "refused" {
			reruns++
		}
		if res.Resend && (res.Outcome == "released" || res.Outcome == "would_release") {
			resend++
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	w := r.env.Stdout
	if reruns > 0 {
		fmt.Fprintf(w, "%s SUCCEEDED: the next delivery of each runs its action again (--rerun-succeeded)\n", plural(reruns, "record was", "records were"))
	}
	switch {
	case resend == 1:
		fmt.Fprintln(w, "re-send: 1 released record was a permanent failure of an SQS event: its message was acknowledged and has left the queue, so it runs again only when its event is sent again (by its producer, or by you with the same body)")
	case resend > 1:
		fmt.Fprintf(w, "re-send: %d released records were permanent failures of SQS events: their messages were acknowledged and have left the queue, so each runs again only when its event is sent again (by its producer, or by you with the same body)\n", resend)
	}
	if out.DryRun {
		fmt.Fprintln(w, "dry run: nothing written")
	}
	return nil
}

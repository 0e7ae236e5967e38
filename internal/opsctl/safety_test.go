package opsctl_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/apigw"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/opsctl"
	"github.com/oncely/oncely/keyexpr"
)

// results decodes release or forget --json output by key.
func results(t *testing.T, out string) (opsctl.ResultsView, map[string]opsctl.ResultView) {
	t.Helper()
	var rv opsctl.ResultsView
	if err := json.Unmarshal([]byte(out), &rv); err != nil {
		t.Fatalf("output is not the JSON of release/forget: %v\n%s", err, out)
	}
	by := map[string]opsctl.ResultView{}
	for _, r := range rv.Results {
		by[r.Key] = r
	}
	return rv, by
}

// TestForgetOfASuccessNeedsTheRerunFlag: forgetting a SUCCEEDED record
// lets its next delivery run the action a second time. That takes
// --rerun-succeeded, named for what it does; without it the record is
// refused (exit 3) and kept, one by one or from a listing piped in, and a
// dry run shows which records would run again.
func TestForgetOfASuccessNeedsTheRerunFlag(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	const done = "evt:order-1003:notify"

	out, errOut, code := f.run("", "forget", done, "--reason", "tired")
	if code != opsctl.ExitRefused || !strings.Contains(out, "refused") || !strings.Contains(out, "AGAIN") || !strings.Contains(out, "--rerun-succeeded") {
		t.Errorf("forget of a SUCCEEDED record: exit %d\n%s%s\nwant exit 3, refused, saying the action would run again and naming --rerun-succeeded", code, out, errOut)
	}
	if rec := mustGet(t, f, done); rec.Status != idem.StatusSucceeded {
		t.Fatalf("the refused forget changed the record: %s", rec.Status)
	}

	// Everything, piped from a listing, as a tired operator would: the
	// success is refused, the rest would be forgotten; no --reason needed
	// for a dry run.
	listing, _, code := f.run("", "list", "--status", "all", "--json")
	if code != 0 {
		t.Fatalf("list --status all: exit %d", code)
	}
	out, errOut, code = f.run(listing, "forget", "--stdin", "--dry-run", "--json")
	if code != opsctl.ExitRefused {
		t.Errorf("forget --stdin --dry-run of every record: exit %d, want 3 (the success refused); stderr %s", code, errOut)
	}
	rv, by := results(t, out)
	if !rv.DryRun || by[done].Outcome != "refused" || !by[done].RerunsSuccess {
		t.Errorf("the success in a dry run: %+v; want refused, reruns_success", by[done])
	}
	if r := by["evt:order-1001:refund"]; r.Outcome != "would_forget" || r.RerunsSuccess {
		t.Errorf("a failure in a dry run: %+v; want would_forget, no reruns_success", r)
	}

	// With the flag, a dry run says which would run again...
	out, _, code = f.run("", "forget", done, "evt:order-1001:refund", "--rerun-succeeded", "--dry-run")
	if code != 0 || !strings.Contains(out, "would forget  "+done+"  was SUCCEEDED, 1 attempt; its next delivery runs the action AGAIN") ||
		!strings.Contains(out, "1 record was SUCCEEDED: the next delivery of each runs its action again") {
		t.Errorf("forget --rerun-succeeded --dry-run: exit %d\n%s\nwant the success marked as running again", code, out)
	}
	if _, found, _ := f.admin.Get(context.Background(), done, now); !found {
		t.Fatal("a dry run deleted the record")
	}
	// ...and the forget itself says so, in its output and its log line.
	out, errOut, code = f.run("", "forget", done, "--rerun-succeeded", "--reason", "corrected event follows")
	if code != 0 || !strings.Contains(out, "forgotten") || !strings.Contains(out, "runs the action AGAIN") || !strings.Contains(errOut, "reruns_success=true") {
		t.Errorf("forget --rerun-succeeded: exit %d\n%s%s\nwant forgotten, saying the action runs again, logged", code, out, errOut)
	}
	if _, found, _ := f.admin.Get(context.Background(), done, now); found {
		t.Error("forget --rerun-succeeded left the record")
	}
}

// TestReleaseOfASuccessPointsAtTheNamedChoice: release never runs a
// completed action again, and its refusal names the consequence of the
// only command that does.
func TestReleaseOfASuccessPointsAtTheNamedChoice(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	out, _, code := f.run("", "release", "evt:order-1003:notify", "--reason", "x")
	if code != opsctl.ExitRefused || !strings.Contains(out, "forget --rerun-succeeded") || !strings.Contains(out, "second time") {
		t.Errorf("release of a success: exit %d\n%s\nwant refused, naming forget --rerun-succeeded and that the action runs a second time", code, out)
	}
}

// TestNothingAfterDoubleDashIsAFlag: "release KEY -- --dry-run" once
// released for real and then looked for a record named --dry-run. After
// "--" nothing is a flag, and what looks like one is refused before
// anything is read or written.
func TestNothingAfterDoubleDashIsAFlag(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	const key = "evt:order-1001:refund"
	for _, args := range [][]string{
		{"release", key, "--", "--dry-run"},
		{"release", "--reason", "x", "--", key, "-dry-run"},
		{"forget", key, "--reason", "x", "--", "--rerun-succeeded"},
	} {
		out, errOut, code := f.run("", args...)
		if code != opsctl.ExitUsage || !strings.Contains(errOut, `after "--" looks like a flag`) || len(f.ops) != 0 {
			t.Errorf("%q: exit %d, %d AWS calls\n%s%s\nwant exit 2 before any AWS call, refusing the flag after --", args, code, len(f.ops), out, errOut)
		}
	}
	if rec := mustGet(t, f, key); rec.ErrorCode != "HTTP_422" {
		t.Fatalf("the record changed: %s", rec.ErrorCode)
	}
	// Keys after "--" are still keys, and flags before it still flags.
	out, errOut, code := f.run("", "release", "--dry-run", "--", key)
	if code != 0 || !strings.Contains(out, "would release  "+key) {
		t.Errorf("release --dry-run -- KEY: exit %d\n%s%s", code, out, errOut)
	}
	// A flag's value may start with '-' or be "--".
	if _, errOut, code := f.run("", "release", key, "--reason", "--", "--dry-run"); code != 0 {
		t.Errorf(`release KEY --reason "--" --dry-run: exit %d (%s); want "--" taken as the reason`, code, errOut)
	}
}

// TestStdinNeverPanics: release and forget --stdin read operators' pipes;
// no input makes them panic, and each bad one is one line, exit 2, before
// any AWS call.
func TestStdinNeverPanics(t *testing.T) {
	f := minidynFixture(t)
	tests := map[string]string{
		"null record":        `{"record":null}`,
		"null in records":    `{"records":[null]}`,
		"records not a list": `{"records":{"key":"evt:order-1:refund"}}`,
		"not found":          `{"key":"evt:order-1:refund","found":false}`,
		"bad base64":         `{"record":{"key":"evt:order-1:refund","status":"FAILED","result_base64":"!!"}}`,
		"unknown status":     `{"records":[{"key":"evt:order-1:refund","status":"DONE"}]}`,
		"twice":              `{"records":[{"key":"evt:order-1:refund","status":"FAILED"}]}{"records":[{"key":"evt:order-1:refund","status":"FAILED"}]}`,
		"a list":             `[]`,
		"null":               `null`,
		"empty":              ``,
		"a second bad doc":   `{"records":[]} {"record":null}`,
	}
	for name, stdin := range tests {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			for _, cmd := range []string{"release", "forget"} {
				_, errOut, code := f.run(stdin, cmd, "--stdin", "--dry-run")
				if code != opsctl.ExitUsage || !strings.HasPrefix(errOut, "oncelyctl "+cmd+": --stdin: ") || strings.Count(errOut, "\n") != 1 || len(f.ops) != 0 {
					t.Errorf("%s --stdin <<< %q: exit %d, %d AWS calls, stderr %q; want exit 2, one line, no AWS call", cmd, stdin, code, len(f.ops), errOut)
				}
			}
		})
	}
}

// FuzzReadRecords: whatever is piped into --stdin, ReadRecords does not
// panic, and what it accepts is a list of records with valid, distinct
// keys and known statuses that reads back the same once printed as list
// --json prints it.
//
// Run longer with: go test -run '^$' -fuzz FuzzReadRecords ./internal/opsctl/
func FuzzReadRecords(f *testing.F) {
	for _, seed := range []string{
		`{"record":null}`, `{"records":[null]}`, `{"records":null}`, `[]`, `null`, ``, `{}`,
		`{"records":[{"key":"evt:order-1:refund","status":"FAILED","token":"t","attempts":1,"lease_until":"2026-12-01T10:00:00Z"}]}`,
		`{"record":{"key":"evt:order-1:refund","status":"SUCCEEDED","result_base64":"AP8="}}`,
		`{"records":[{"key":"evt:order-1:refund","status":"IN_PROGRESS","lease_until":null,"audit":[{"by":"x"}]}]}{"records":[]}`,
		`{"record":{"key":"evt:order-1:refund","status":"FAILED","audit_raw":"x","result":"\u0000"}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := opsctl.ReadRecords(strings.NewReader(in))
		if err != nil {
			if recs != nil || strings.Contains(err.Error(), "\n") {
				t.Fatalf("ReadRecords(%q) = %d records, error %q; want none, and one line", in, len(recs), err)
			}
			return
		}
		seen := map[string]bool{}
		lv := opsctl.ListView{Records: []opsctl.RecordView{}}
		for _, rec := range recs {
			if idem.ValidateKey(rec.Key) != nil || seen[rec.Key] {
				t.Fatalf("ReadRecords(%q) accepted key %q (malformed or repeated)", in, rec.Key)
			}
			seen[rec.Key] = true
			if rec.Status != idem.StatusFailed && rec.Status != idem.StatusSucceeded && rec.Status != idem.StatusInProgress {
				t.Fatalf("ReadRecords(%q) accepted status %q", in, rec.Status)
			}
			lv.Records = append(lv.Records, recordView(rec))
		}
		out, err := json.Marshal(lv)
		if err != nil {
			t.Fatal(err)
		}
		again, err := opsctl.ReadRecords(strings.NewReader(string(out)))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("what ReadRecords(%q) gave, printed as list --json, reads back as %d records (%v); want %d", in, len(again), err, len(recs))
		}
		for i := range recs {
			if again[i].Key != recs[i].Key || again[i].Token != recs[i].Token || again[i].Status != recs[i].Status || again[i].Attempts != recs[i].Attempts {
				t.Fatalf("record %d read back as %+v, want %+v", i, again[i], recs[i])
			}
		}
	})
}

// recordView is what list --json prints for rec, for the fuzz target's
// round trip (the fields release and forget compare).
func recordView(rec idem.Record) opsctl.RecordView {
	return opsctl.RecordView{Key: rec.Key, Status: rec.Status, Token: rec.Token, Attempts: rec.Attempts}
}

// TestFiltersAreCheckedBeforeAnyAWSCall: a filter that can match nothing
// (an unknown poison reason, a combination that cannot apply) is refused
// with exit 2 and what is known, before any AWS call; an unknown failure
// code is warned about and listed anyway (an action may store its own).
func TestFiltersAreCheckedBeforeAnyAWSCall(t *testing.T) {
	f := minidynFixture(t)
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"list", "--poison", "--reason", "NOPE"}, `--reason "NOPE": poison notes have NOT_JSON, KEY_MISSING, INVALID_ACTION, TOO_LARGE, INVALID_KEY, INVALID_PAYLOAD, KEY_REUSED`},
		{[]string{"list", "--poison", "--status", "failed"}, "--status selects records; poison notes have no status"},
		{[]string{"list", "--poison", "--status", "all"}, "--status selects records"},
		{[]string{"list", "--poison", "--code", "HTTP_422"}, "--code selects records; with --poison, use --reason"},
		{[]string{"list", "--reason", "KEY_REUSED"}, "--reason selects poison notes"},
		{[]string{"list", "--status", "succeeded", "--code", "HTTP_422"}, "--status succeeded records have no code"},
		{[]string{"list", "--status", "in_progress", "--code", "HTTP_422"}, "--status in_progress records have no code"},
		{[]string{"list", "--status", "abandoned", "--code", "RELEASED"}, "--status abandoned records have no code"},
		{[]string{"list", "--status", "released", "--code", "HTTP_422"}, "--status released records have code RELEASED, not HTTP_422"},
		{[]string{"list", "--status", "permanent", "--code", "released"}, "a released record's state is released, not permanent"},
		{[]string{"list", "--status", "expired"}, "expired records count as absent"},
		{[]string{"list", "--status", "stuck"}, `want a state (failed, permanent, retryable, released, in_progress, running, abandoned, succeeded, all)`},
		{[]string{"stats", "--code", "HTTP_422"}, "flag provided but not defined: -code"},
		{[]string{"forget", "evt:order-1001:refund"}, "forget needs --reason"},
		{[]string{"release", "--rerun-succeeded", "evt:order-1001:refund"}, "flag provided but not defined: -rerun-succeeded"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			_, errOut, code := f.run("", tt.args...)
			if code != opsctl.ExitUsage || !strings.Contains(errOut, tt.stderr) || len(f.ops) != 0 {
				t.Errorf("exit %d, %d AWS calls, stderr %q; want exit 2 before any AWS call, saying %q", code, len(f.ops), errOut, tt.stderr)
			}
		})
	}
	out, errOut, code := f.run("", "list", "--code", "my_own_code")
	if code != 0 || !strings.Contains(errOut, `warning: --code "my_own_code" is neither HTTP_<status> nor one of oncely's codes`) || !strings.Contains(out, "0 records") {
		t.Errorf("list --code my_own_code: exit %d\n%s%s\nwant a warning, then the listing", code, out, errOut)
	}
	if _, errOut, _ := f.run("", "list", "--code", "http_599"); strings.Contains(errOut, "warning") {
		t.Errorf("list --code http_599 warned: %s; want HTTP_<status> known", errOut)
	}
}

// TestFiltersMatchInAnyCase: codes and reasons are matched as stored
// whatever case the operator types (the index needs moto).
func TestFiltersMatchInAnyCase(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	for _, args := range [][]string{{"list", "--code", "http_422", "--json"}, {"list", "--code", "Http_422", "--status", "PERMANENT", "--json"}} {
		out, errOut, code := f.run("", args...)
		var lv opsctl.ListView
		if code != 0 || json.Unmarshal([]byte(out), &lv) != nil || len(lv.Records) != 2 {
			t.Errorf("%q: exit %d, %d records\n%s%s\nwant the 2 HTTP_422 refunds", args, code, len(lv.Records), out, errOut)
		}
	}
	out, _, code := f.run("", "list", "--poison", "--reason", "key_reused", "--json")
	var lv opsctl.ListView
	if code != 0 || json.Unmarshal([]byte(out), &lv) != nil || len(lv.Poison) != 1 || lv.Poison[0].Key != "evt:order-1003:notify" {
		t.Errorf("list --poison --reason key_reused: exit %d\n%s\nwant the one KEY_REUSED note, naming its key", code, out)
	}
}

// TestNamespaceTypoGetsAHint: an empty listing of a namespace given with
// --namespace that is not the configuration's and has nothing in the
// index at all is most likely a typo; it says so, from at most one item
// per index shard, never a scan. The configured namespace, and one with
// entries, get no hint.
func TestNamespaceTypoGetsAHint(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	out, errOut, code := f.run("", "list", "--namespace", "shop-notfy")
	if code != 0 || !strings.Contains(out, "0 records") ||
		!strings.Contains(errOut, `hint: namespace "shop-notfy" (from --namespace) has no failure and no poison note at all`) ||
		!strings.Contains(errOut, `the configuration's is "shop-notify" (from $IDEMPOTENCY_NAMESPACE)`) {
		t.Errorf("list --namespace shop-notfy: exit %d\n%s%s\nwant 0 records and the hint", code, out, errOut)
	}
	if slices.Contains(f.ops, "Scan") || count(f.ops, "Query") != 4+8 {
		t.Errorf("operations %v; want the listing's 4 queries and the hint's 8, no scan", f.ops)
	}
	for _, args := range [][]string{
		{"list", "--namespace", "shop-notify", "--code", "HTTP_500"}, // the configured one, nothing of that code
		{"list", "--code", "HTTP_500"},
	} {
		if _, errOut, code := f.run("", args...); code != 0 || strings.Contains(errOut, "hint") {
			t.Errorf("%q: exit %d, stderr %q; want no hint", args, code, errOut)
		}
	}
	// Another function's namespace with failures of its own: no hint.
	other := *f
	other.t = t
	other.vars = map[string]string{"IDEMPOTENCY_TABLE": f.table, "IDEMPOTENCY_NAMESPACE": "shop-refunds"}
	if _, errOut, _ := other.run("", "list", "--namespace", "shop-notify", "--code", "HTTP_500"); strings.Contains(errOut, "hint") {
		t.Errorf("a namespace with index entries got a hint: %s", errOut)
	}
}

func count(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

// TestAbandonedAreOneCommandAway: stuck events are not in the index; the
// default view and stats name the command that finds them (its output and
// the states' listings are golden files of TestListAndStatsHumanOutput),
// and stats --scan reads the table once for records and notes alike.
func TestAbandonedAreOneCommandAway(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	for _, args := range [][]string{{"list"}, {"stats"}} {
		if out, _, _ := f.run("", args...); !strings.Contains(out, "`oncelyctl list --status abandoned`") {
			t.Errorf("%q does not name the command that finds stuck events:\n%s", args, out)
		}
	}
	out, _, code := f.run("", "list", "--status", "abandoned", "--json")
	var lv opsctl.ListView
	if code != 0 || json.Unmarshal([]byte(out), &lv) != nil || len(lv.Records) != 1 || lv.Records[0].Key != "evt:order-1006:notify" || lv.Cost.Method != "scan" {
		t.Errorf("list --status abandoned: exit %d\n%s\nwant the one stuck event, by scan", code, out)
	}
	if _, _, code := f.run("", "stats", "--scan"); code != 0 || count(f.ops, "Scan")+count(f.ops, "Query") != 1 {
		t.Errorf("stats --scan: exit %d, operations %v; want one read of the table", code, f.ops)
	}
}

// TestReleaseIsIdempotent: releasing a released record changes nothing
// (its message used to grow with each release) and is no error.
func TestReleaseIsIdempotent(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	const key = "evt:order-1001:refund"
	if _, _, code := f.run("", "release", key, "--reason", "fixed"); code != 0 {
		t.Fatalf("first release: exit %d", code)
	}
	first := mustGet(t, f, key)
	out, _, code := f.run("", "release", key, "--reason", "fixed, again")
	if code != 0 || !strings.Contains(out, `already released  `+key+`  released already by unverified local user tester at 2026-12-01T10:00:00Z ("fixed"); its next delivery runs the action; nothing written`) {
		t.Errorf("second release: exit %d\n%s\nwant already released, exit 0", code, out)
	}
	if again := mustGet(t, f, key); again.Token != first.Token || again.ErrorMessage != first.ErrorMessage || again.Audit != first.Audit {
		t.Errorf("the second release changed the record:\n%+v\nwant\n%+v", again, first)
	}
}

// TestReleaseRemindsToResend: a released permanent failure of an SQS event
// runs again only when its event is sent again (its message was
// acknowledged); the output says so for those alone.
func TestReleaseRemindsToResend(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	apiKey := apigw.ScopedKey("anonymous", "order-7f3a9c21")
	f.write(apiKey, now.Add(-time.Minute), 30*time.Second, failWith("HTTP_422", "422 from downstream", false, 1))
	keys := []string{"evt:order-1001:refund", "evt:order-1004:notify", "evt:order-1006:notify", apiKey}
	out, _, code := f.run("", append([]string{"release", "--json", "--reason", "fixed"}, keys...)...)
	if code != 0 {
		t.Fatalf("release: exit %d\n%s", code, out)
	}
	_, by := results(t, out)
	for key, want := range map[string]bool{keys[0]: true, keys[1]: false, keys[2]: false, apiKey: false} {
		if got := by[key]; got.Outcome != "released" || got.Resend != want {
			t.Errorf("%s: %s, resend %v; want released, resend %v (only an SQS event's permanent failure left the queue)", key, got.Outcome, got.Resend, want)
		}
	}
	f2 := minidynFixture(t)
	f2.seedIncident()
	text, _, _ := f2.run("", "release", "--reason", "fixed", "evt:order-1001:refund", "evt:order-1002:refund", "evt:order-1004:notify")
	if !strings.Contains(text, "re-send: 2 released records were permanent failures of SQS events: their messages were acknowledged and have left the queue") {
		t.Errorf("release output lacks the re-send reminder for the 2 permanent failures:\n%s", text)
	}
	text, _, _ = f2.run("", "release", "--reason", "fixed", "evt:order-1007:notify")
	if !strings.Contains(text, "re-send: 1 released record was a permanent failure of an SQS event: its message was acknowledged and has left the queue") {
		t.Errorf("release output lacks the re-send reminder for the exhausted record:\n%s", text)
	}
}

// TestHelpIsOutput: asked-for help goes to stdout (oncelyctl --help | less),
// a missing command's usage to stderr with exit 2.
func TestHelpIsOutput(t *testing.T) {
	f := minidynFixture(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"list", "-h"}, {"forget", "--help"}} {
		out, errOut, code := f.run("", args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: oncelyctl") {
			t.Errorf("%q: exit %d, stdout %d bytes, stderr %q; want the usage on stdout, exit 0", args, code, len(out), errOut)
		}
	}
	if out, _, _ := f.run("", "forget", "-h"); !strings.Contains(out, "-rerun-succeeded") || !strings.Contains(out, "runs its action again") {
		t.Errorf("forget -h does not explain --rerun-succeeded:\n%s", out)
	}
	for _, cmd := range []string{"release", "forget"} {
		if out, _, _ := f.run("", cmd, "-h"); !strings.Contains(out, "-may-repeat-side-effect") || !strings.Contains(oneSpace(out), "OUTCOME_UNKNOWN failures too") || !strings.Contains(out, "a second time") {
			t.Errorf("%s -h does not explain --may-repeat-side-effect:\n%s", cmd, out)
		}
	}
	if out, _, _ := f.run("", "--help"); !strings.Contains(out, "an OUTCOME_UNKNOWN one only with --may-repeat-side-effect") {
		t.Errorf("oncelyctl --help does not say which flag releases or forgets an OUTCOME_UNKNOWN record:\n%s", out)
	}
	if out, errOut, code := f.run(""); code != opsctl.ExitUsage || out != "" || !strings.Contains(errOut, "usage: oncelyctl") {
		t.Errorf("no command: exit %d, stdout %q; want the usage on stderr, exit 2", code, out)
	}
}

// TestMessagesNameOnlyFlagsThatExist: every --flag that oncelyctl's text
// (and the admin store's errors, which operators read) names is a flag of
// some command: an error once sent operators to --stack, which never
// existed.
func TestMessagesNameOnlyFlagsThatExist(t *testing.T) {
	f := minidynFixture(t)
	flags := map[string]bool{"help": true} // the flag package's own
	flagLine := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, cmd := range []string{"get", "list", "stats", "release", "forget", "config"} {
		out, _, _ := f.run("", cmd, "-h")
		for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
			flags[m[1]] = true
		}
	}
	if len(flags) < 20 {
		t.Fatalf("found %d flags in the commands' help; want them all", len(flags))
	}
	named := regexp.MustCompile(`--([a-z][a-z-]*)`)
	files, _ := filepath.Glob("*.go")
	files = append(files, "../ddbstore/admin.go", "../ddbstore/list.go")
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		parsed, err := parser.ParseFile(fset, file, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(parsed, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, m := range named.FindAllStringSubmatch(s, -1) {
				if !flags[m[1]] {
					t.Errorf("%s: %q names --%s, which no command has", fset.Position(lit.Pos()), s, m[1])
				}
			}
			return true
		})
	}
}

// TestBodyIsFingerprintedLikeTheFunction: get --body resolves the payload
// expression as the key expression is (flag, else the function's
// variable) and shows it in config; a body that differs only outside the
// payload is the same event, as the function sees it.
func TestBodyIsFingerprintedLikeTheFunction(t *testing.T) {
	f := minidynFixture(t)
	const payloadExpr = "{id: id, action: action, amount: amount}"
	x, err := keyexpr.New("", payloadExpr)
	if err != nil {
		t.Fatal(err)
	}
	stored := `{"id":"order-77","action":"refund","amount":5,"sent_at":"2026-12-01T09:00:00Z"}`
	req, err := x.Request([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := idem.Reservation{Key: req.Key, Fingerprint: req.Fingerprint, Token: "tok-77", Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)}
	if _, ok, err := f.admin.Reserve(ctx, r); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := f.admin.Complete(ctx, idem.Finish{Key: req.Key, Token: "tok-77", Now: now, Attempts: 1, ExpiresAt: now.Add(time.Hour), Result: []byte(`{"status":202}`)}); err != nil {
		t.Fatal(err)
	}
	resent := filepath.Join(t.TempDir(), "resent.json")
	if err := os.WriteFile(resent, []byte(`{"id":"order-77","action":"refund","amount":5,"sent_at":"2026-12-01T09:05:00Z"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f.vars["IDEMPOTENCY_PAYLOAD_JMESPATH"] = payloadExpr
	if out, _, code := f.run("", "get", "--body", resent); code != 0 || !strings.Contains(out, "matches the stored one") {
		t.Errorf("get --body with $IDEMPOTENCY_PAYLOAD_JMESPATH: exit %d\n%s\nwant the payload to match (only sent_at differs, outside the payload)", code, out)
	}
	if out, _, _ := f.run("", "config"); !strings.Contains(oneSpace(out), "payload expression "+payloadExpr+" from $IDEMPOTENCY_PAYLOAD_JMESPATH") {
		t.Errorf("config does not show the payload expression:\n%s", out)
	}
	delete(f.vars, "IDEMPOTENCY_PAYLOAD_JMESPATH")
	if out, _, _ := f.run("", "get", "--body", resent, "--payload-expr", payloadExpr); !strings.Contains(out, "matches the stored one") {
		t.Errorf("get --body --payload-expr:\n%s\nwant a match", out)
	}
	// Without the expression the whole body is the payload: it differs,
	// and the advice names what forgetting a success does.
	if out, _, _ := f.run("", "get", "--body", resent); !strings.Contains(out, "DIFFERS") || !strings.Contains(out, "forget --rerun-succeeded") {
		t.Errorf("get --body without the payload expression:\n%s\nwant DIFFERS, naming forget --rerun-succeeded", out)
	}
	if out, _, _ := f.run("", "config"); !strings.Contains(oneSpace(out), "payload expression - from default (the whole body)") {
		t.Errorf("config without a payload expression:\n%s", out)
	}
}

// oneSpace collapses a table's alignment.
func oneSpace(s string) string {
	return regexp.MustCompile(` {2,}`).ReplaceAllString(s, " ")
}

// TestUnknownOutcomeNeedsTheNamedChoice: an OUTCOME_UNKNOWN failure's
// action may have had its side effect, so release and forget refuse it
// without --may-repeat-side-effect, the flag named for what it risks, and
// say why; the consents to other risks (--force: a live lease;
// --rerun-succeeded: a success) are refused with a hint naming it; with it,
// they act.
func TestUnknownOutcomeNeedsTheNamedChoice(t *testing.T) {
	f := minidynFixture(t)
	const key, other = "evt:ledger-9:ledger", "evt:ledger-10:ledger"
	for _, k := range []string{key, other} {
		f.write(k, now.Add(-5*time.Minute), 30*time.Second, failWith(idem.CodeOutcomeUnknown, "the write was sent and no reply came", false, 1))
	}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"release", key, "--reason", "x"}, []string{"second time", "--may-repeat-side-effect --reason"}},
		{[]string{"forget", key, "--reason", "x"}, []string{"second time", "--may-repeat-side-effect --reason"}},
		{[]string{"release", key, "--force", "--reason", "x"}, []string{"--force takes a live lease and is no consent to this", "add --may-repeat-side-effect --reason"}},
		{[]string{"forget", key, "--rerun-succeeded", "--reason", "x"}, []string{"--rerun-succeeded re-runs a SUCCEEDED record and is no consent to this", "add --may-repeat-side-effect --reason"}},
	} {
		out, _, code := f.run("", tt.args...)
		if code != opsctl.ExitRefused || !strings.Contains(out, "refused") || !strings.Contains(out, "OUTCOME_UNKNOWN") {
			t.Errorf("%q: exit %d\n%s\nwant refused (exit 3), naming OUTCOME_UNKNOWN", tt.args, code, out)
		}
		for _, w := range tt.want {
			if !strings.Contains(oneSpace(out), w) {
				t.Errorf("%q: output lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
	if rec := mustGet(t, f, key); rec.ErrorCode != idem.CodeOutcomeUnknown {
		t.Fatalf("the refusals changed the record: %s", rec.ErrorCode)
	}
	if out, errOut, code := f.run("", "release", key, "--may-repeat-side-effect", "--reason", "the downstream has no such write"); code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("release --may-repeat-side-effect: exit %d\n%s%s", code, out, errOut)
	}
	rec := mustGet(t, f, key)
	if rec.ErrorCode != idem.CodeReleased {
		t.Errorf("after release --may-repeat-side-effect: %s, want RELEASED", rec.ErrorCode)
	}
	if !strings.Contains(rec.Audit, `"op":"release --may-repeat-side-effect"`) {
		t.Errorf("the audit does not name the consent: %s", rec.Audit)
	}
	if out, errOut, code := f.run("", "forget", other, "--may-repeat-side-effect", "--reason", "the downstream has no such write"); code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("forget --may-repeat-side-effect: exit %d\n%s%s", code, out, errOut)
	}
	if _, found, err := f.admin.Get(context.Background(), other, now); err != nil || found {
		t.Errorf("after forget --may-repeat-side-effect: found %v, err %v; want gone", found, err)
	}
}

package opsctl_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/opsctl"
)

func TestReleaseAndForget(t *testing.T) {
	f := minidynFixture(t)
	f.seedIncident()
	ctx := context.Background()
	get := func(key string) idem.Record {
		t.Helper()
		rec, _, err := f.admin.Get(ctx, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	tests := []struct {
		name    string
		stdin   string
		args    []string
		code    int
		outcome string // the first result's outcome, from --json
		check   func(t *testing.T)
	}{
		{"dry run writes nothing", "", []string{"release", "evt:order-1001:refund", "--dry-run"}, opsctl.ExitOK, "would_release", func(t *testing.T) {
			if rec := get("evt:order-1001:refund"); rec.ErrorCode != "HTTP_422" {
				t.Errorf("after a dry run the record is %s, want HTTP_422 untouched", rec.ErrorCode)
			}
		}},
		{"release a permanent failure", "", []string{"release", "evt:order-1001:refund", "--reason", "fixed"}, opsctl.ExitOK, "released", func(t *testing.T) {
			rec := get("evt:order-1001:refund")
			if rec.ErrorCode != idem.CodeReleased || rec.Attempts != 0 || !rec.Retryable || !strings.Contains(rec.Audit, `"reason":"fixed"`) {
				t.Errorf("released record %s attempts %d retryable %v audit %s; want RELEASED, 0, retryable, the reason in the audit", rec.ErrorCode, rec.Attempts, rec.Retryable, rec.Audit)
			}
		}},
		{"release an exhausted record by id and action", "", []string{"release", "--id", "order-1007", "--action", "notify"}, opsctl.ExitOK, "released", nil},
		{"release an abandoned lease", "", []string{"release", "evt:order-1006:notify"}, opsctl.ExitOK, "released", nil},
		{"release a live lease is refused", "", []string{"release", "evt:order-1005:notify"}, opsctl.ExitRefused, "refused", func(t *testing.T) {
			if rec := get("evt:order-1005:notify"); rec.Status != idem.StatusInProgress || rec.Token != "tok-evt-order-1005-notify" {
				t.Errorf("the live record changed: %s %s", rec.Status, rec.Token)
			}
		}},
		{"release a succeeded record is refused", "", []string{"release", "evt:order-1003:notify", "--force", "--reason", "x"}, opsctl.ExitRefused, "refused", nil},
		{"forced release of a live lease", "", []string{"release", "evt:order-1005:notify", "--force", "--reason", "owner hung"}, opsctl.ExitOK, "released", func(t *testing.T) {
			if rec := get("evt:order-1005:notify"); !strings.Contains(rec.Audit, `"op":"release --force"`) {
				t.Errorf("audit %s, want a release --force entry", rec.Audit)
			}
		}},
		{"a token that changed hands is refused", "", []string{"release", "evt:order-1002:refund", "--token", "not-what-is-stored"}, opsctl.ExitRefused, "refused", nil},
		{"unknown key", "", []string{"release", "evt:order-9999:refund"}, opsctl.ExitNotFound, "not_found", nil},
		{"forget", "", []string{"forget", "evt:order-1004:notify", "--reason", "corrected event follows"}, opsctl.ExitOK, "forgotten", func(t *testing.T) {
			out, _, code := f.run("", "get", "evt:order-1004:notify")
			if code != opsctl.ExitNotFound || !strings.Contains(out, `forgotten 2026-12-01T10:00:00.000Z`) || !strings.Contains(out, `"corrected event follows"`) {
				t.Errorf("get after forget: exit %d, output %q; want 4 and the forget note", code, out)
			}
		}},
		{"forget a live lease is refused", "", []string{"forget", "evt:order-1005:notify", "--reason", "x"}, opsctl.ExitRefused, "", nil},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			if tt.name == "forget a live lease is refused" {
				f.write("evt:order-2005:notify", now.Add(-time.Second), time.Minute, nil)
				tt.args[1] = "evt:order-2005:notify"
				tt.outcome = "refused"
			}
			out, errOut, code := f.run(tt.stdin, append(tt.args, "--json")...)
			if code != tt.code {
				t.Fatalf("exit code got %d, want %d; stderr %s", code, tt.code, errOut)
			}
			var rv opsctl.ResultsView
			if err := json.Unmarshal([]byte(out), &rv); err != nil || len(rv.Results) != 1 {
				t.Fatalf("output %q (%v), want one result", out, err)
			}
			if got := rv.Results[0].Outcome; got != tt.outcome {
				t.Errorf("outcome got %q, want %q (%s)", got, tt.outcome, rv.Results[0].Detail)
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
}

// TestReleaseFromListing pipes list --json into release --stdin: what the
// operator saw is what is released, and a record that changed since is
// refused.
func TestReleaseFromListing(t *testing.T) {
	f := motoFixture(t)
	f.seedIncident()
	listing, _, code := f.run("", "list", "--code", "HTTP_422", "--json")
	if code != 0 {
		t.Fatalf("list exit %d", code)
	}
	// One of them changes hands after the listing: a delivery takes it over.
	ctx := context.Background()
	if _, _, err := f.admin.Release(ctx, mustGet(t, f, "evt:order-1002:refund"), idem.Release{Token: "someone-else", Now: now}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := f.run(listing, "release", "--stdin", "--reason", "currency bug fixed (INC-7)")
	if code != opsctl.ExitRefused {
		t.Fatalf("exit code got %d, want %d (one refused); stderr %s", code, opsctl.ExitRefused, errOut)
	}
	for _, want := range []string{"released  evt:order-1001:refund  was FAILED HTTP_422, 1 attempt", "refused   evt:order-1002:refund  it changed hands since you read it"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, `msg="oncelyctl release" key=evt:order-1001:refund`) || !strings.Contains(errOut, `reason="currency bug fixed (INC-7)"`) {
		t.Errorf("stderr lacks the write's log line with who and why:\n%s", errOut)
	}
}

func mustGet(t *testing.T, f *fixture, key string) idem.Record {
	t.Helper()
	rec, found, err := f.admin.Get(context.Background(), key, now)
	if err != nil || !found {
		t.Fatalf("Get(%s) = %v, %v", key, found, err)
	}
	return rec
}

package opsctl_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/internal/opsctl"
)

// A GitHub delivery's record is keyed by its body: get finds it from the
// body as GitHub's Recent Deliveries shows it (indented), with
// --source and --body; a delivery stored under its id (every Standard
// Webhooks and Stripe delivery, and a GitHub delivery received before the
// change) is found with --source and --delivery-id, and a miss there says
// where a GitHub delivery is now. Against a real table (minidyn).
func TestGetInboundDelivery(t *testing.T) {
	f := minidynFixture(t)
	const id = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":12345678}`)
	key, digest, err := inbound.BodyKey("github", body)
	if err != nil {
		t.Fatal(err)
	}
	// As the queue path stores them: the body's key, with the body's
	// fingerprint, and the record under the id from before the change.
	ctx := context.Background()
	for _, k := range []string{key, "wh:github:" + id} {
		r := idem.Reservation{Key: k, Fingerprint: digest, Token: "tok", Now: now.Add(-time.Minute), LeaseUntil: now, ExpiresAt: now.Add(336 * time.Hour)}
		if _, ok, err := f.admin.Reserve(ctx, r); err != nil || !ok {
			t.Fatalf("Reserve(%s) = %v, %v", k, ok, err)
		}
		if err := f.admin.Complete(ctx, idem.Finish{Key: k, Token: "tok", Now: now.Add(-time.Minute), Attempts: 1, ExpiresAt: now.Add(336 * time.Hour), Result: []byte(`{"status":200}`)}); err != nil {
			t.Fatal(err)
		}
	}
	shown := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(shown, []byte("{\n  \"zen\": \"Keep it logically awesome.\",\n  \"hook_id\": 12345678\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout []string
		stderr string
	}{
		{name: "the body, indented", args: []string{"--source", "github", "--body", shown},
			stdout: []string{key, "SUCCEEDED", "the body's fingerprint matches the stored one"}},
		{name: "the body on stdin", args: []string{"--source", "github", "--body", "-"}, stdin: string(body),
			stdout: []string{key, "SUCCEEDED"}},
		{name: "the id of a delivery stored under it", args: []string{"--source", "github", "--delivery-id", id},
			stdout: []string{"wh:github:" + id, "SUCCEEDED"}},
		{name: "an id with nothing under it", args: []string{"--source", "github", "--delivery-id", "00000000-0000-0000-0000-000000000000"}, code: opsctl.ExitNotFound,
			stderr: "is under wh:github:sha256:DIGEST: name it with --source github --body FILE"},
		{name: "an id without a source", args: []string{"--delivery-id", id}, code: opsctl.ExitUsage, stderr: "--delivery-id goes with --source"},
		{name: "a source alone", args: []string{"--source", "github"}, code: opsctl.ExitUsage, stderr: "--source takes one of --delivery-id"},
		{name: "both an id and a body", args: []string{"--source", "github", "--delivery-id", id, "--body", shown}, code: opsctl.ExitUsage, stderr: "--source takes one of --delivery-id"},
		{name: "and a key", args: []string{"--source", "github", "--delivery-id", id, "evt:order-1:refund"}, code: opsctl.ExitUsage, stderr: "name the record one way"},
		{name: "a body that is not JSON", args: []string{"--source", "github", "--body", "-"}, stdin: "zen", code: opsctl.ExitUsage, stderr: "give no key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := f.run(tt.stdin, append([]string{"get"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("get exit %d, stderr %q; want %d containing %q", code, errOut, tt.code, tt.stderr)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(out, want) {
					t.Errorf("get's output does not say %q:\n%s", want, out)
				}
			}
		})
	}
}

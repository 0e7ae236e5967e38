package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/opsctl"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

// oncelyctl is the operator's tool and devstack the local stack, built
// from cmd/ by TestMain into one directory (the stack's -bin).
var oncelyctl, devstack string

func buildOncelyctl(dir string) error {
	oncelyctl, devstack = filepath.Join(dir, "oncelyctl"), filepath.Join(dir, "devstack")
	for _, b := range []struct{ out, pkg string }{{oncelyctl, "cmd/oncelyctl"}, {devstack, "cmd/devstack"}} {
		if out, err := exec.Command("go", "build", "-o", b.out, "github.com/oncely/oncely/"+b.pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// ctl runs the built oncelyctl against the function's table, as an
// operator would: the function's variables, moto as DynamoDB and STS.
func (f *fn) ctl(stdin string, args ...string) (stdout, stderr string, code int) {
	f.t.Helper()
	cmd := exec.Command(oncelyctl, args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + f.t.TempDir(), "USER=e2e",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL=" + os.Getenv("IDEM_TEST_MOTO_ENDPOINT"),
		"IDEMPOTENCY_TABLE=" + f.table, "IDEMPOTENCY_NAMESPACE=oncely-e2e",
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		f.t.Fatalf("oncelyctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestE2EOperatorReleasesPermanentFailures is the incident of docs/operating.md: a
// downstream bug answers 422 to refunds, so they fail for good and are
// acknowledged; oncelyctl finds them and explains them; the bug is fixed;
// oncelyctl releases them; the producer sends them again, and each runs
// once more and succeeds, while the event that succeeded is not run again.
func TestE2EOperatorReleasesPermanentFailures(t *testing.T) {
	f := start(t, 10)
	if err := f.down.SetRules([]fakewebhook.Rule{{Match: "evt:*:refund", Reply: fakewebhook.Reply{Status: 422}}}); err != nil {
		t.Fatal(err)
	}
	batch := sqsBatch(t,
		[2]string{"m1", `{"id":"order-1","action":"refund","amount":10}`},
		[2]string{"m2", `{"id":"order-2","action":"refund","amount":20}`},
		[2]string{"m3", `{"id":"order-3","action":"notify"}`},
	)
	if ids := f.sqs(batch); len(ids) != 0 {
		t.Fatalf("failures %v; want none (permanent failures are acknowledged)", ids)
	}

	out, errOut, code := f.ctl("", "get", "--id", "order-1", "--action", "refund")
	if code != 0 || !strings.Contains(out, "permanent (FAILED for good)") || !strings.Contains(out, "HTTP_422") {
		t.Fatalf("get: exit %d, output:\n%s%s\nwant permanent (FAILED for good), HTTP_422", code, out, errOut)
	}
	listing, errOut, code := f.ctl("", "list", "--code", "HTTP_422", "--json")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	var lv opsctl.ListView
	if err := json.Unmarshal([]byte(listing), &lv); err != nil || len(lv.Records) != 2 {
		t.Fatalf("list --json = %d records (%v), want the 2 refunds:\n%s", len(lv.Records), err, listing)
	}
	if lv.Cost.Method != "query" || lv.Cost.ItemsRead != 2 {
		t.Errorf("list cost %+v, want a query of the index reading only the 2 failed records", lv.Cost)
	}

	// Released before the fix, they would fail again: the bug is fixed first.
	if err := f.down.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = f.ctl(listing, "release", "--stdin", "--reason", "refund bug fixed (INC-7)")
	if code != 0 || strings.Count(out, "released  ") != 2 || !strings.Contains(out, "re-send: 2 released records were permanent failures of SQS events") {
		t.Fatalf("release: exit %d, output:\n%s%s\nwant 2 released, and the reminder that their messages must be sent again", code, out, errOut)
	}
	if !strings.Contains(errOut, "by=arn:aws:sts::123456789012:user/moto") {
		t.Errorf("release log lacks the STS caller identity:\n%s", errOut)
	}

	// The producer sends the same events again.
	if ids := f.sqs(batch); len(ids) != 0 {
		t.Fatalf("re-sent batch failures %v; want none", ids)
	}
	for key, want := range map[string][]int{
		"evt:order-1:refund": {422, 202},
		"evt:order-2:refund": {422, 202},
		"evt:order-3:notify": {202},
	} {
		if got := f.down.Statuses(key); !slices.Equal(got, want) {
			t.Errorf("%s: downstream answered %v, want %v (once more after the release, and no more)", key, got, want)
		}
	}
	rec := f.record("evt:order-1:refund")
	if s(rec, "status") != "SUCCEEDED" || s(rec, "attempts") != "1" || !strings.Contains(s(rec, "audit"), "refund bug fixed (INC-7)") {
		t.Errorf("after the re-run: status %s attempts %s audit %s; want SUCCEEDED, 1 attempt, the release's audit carried forward",
			s(rec, "status"), s(rec, "attempts"), s(rec, "audit"))
	}
	// Nothing is left to release, and a third copy is replayed.
	if out, _, code := f.ctl("", "list", "--code", "RELEASED"); code != 0 || !strings.Contains(out, "0 records") {
		t.Errorf("list --code RELEASED after the re-run: exit %d\n%s\nwant 0 records", code, out)
	}
	if ids := f.sqs(batch); len(ids) != 0 || f.down.Total() != 5 {
		t.Errorf("a third copy: failures %v, downstream total %d; want none, still 5", ids, f.down.Total())
	}
}

// TestE2EReleaseAgainstALiveOwnerIsRefused: while the function holds the
// key (the downstream holds its request), release is refused and changes
// nothing; the owner then completes as if nothing happened.
func TestE2EReleaseAgainstALiveOwnerIsRefused(t *testing.T) {
	f := start(t, 20, "NOTIFY_TIMEOUT=15s")
	hold := make(chan struct{})
	f.down.Script(key42, fakewebhook.Reply{Hold: hold})
	done := make(chan []string)
	go func() { done <- f.sqs(sqsBatch(t, [2]string{"m1", body42})) }()
	for deadline := time.Now().Add(10 * time.Second); f.down.Count(key42) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(hold)
			t.Fatal("the delivery never reached the downstream")
		}
	}
	before := f.record(key42)
	out, errOut, code := f.ctl("", "release", key42, "--reason", "looks stuck")
	if code != opsctl.ExitRefused || !strings.Contains(out, "IN_PROGRESS under a live lease") || !strings.Contains(out, "--force") {
		t.Errorf("release of a live owner's record: exit %d, output:\n%s%s\nwant exit 3, refused for the live lease, naming --force", code, out, errOut)
	}
	if _, _, code := f.ctl("", "forget", key42, "--reason", "x"); code != opsctl.ExitRefused {
		t.Errorf("forget of a live owner's record: exit %d, want 3", code)
	}
	if after := f.record(key42); s(after, "token") != s(before, "token") || s(after, "status") != "IN_PROGRESS" {
		t.Errorf("the refused release changed the record: %s %s", s(after, "status"), s(after, "token"))
	}
	close(hold)
	if ids := <-done; len(ids) != 0 {
		t.Fatalf("the owner's invocation failures %v; want none", ids)
	}
	if rec := f.record(key42); s(rec, "status") != "SUCCEEDED" || f.down.Count(key42) != 1 {
		t.Errorf("after the owner finished: %s, %d deliveries; want SUCCEEDED, 1", s(rec, "status"), f.down.Count(key42))
	}
}

// TestE2EForgetLetsACorrectedEventRun: an event re-sent with the same id
// and a corrected payload is refused (KEY_REUSED, a poison note naming the
// key) until the operator forgets the old record. The old event succeeded,
// so forgetting it runs the action again: that takes --rerun-succeeded, and
// without it nothing is deleted and nothing runs twice.
func TestE2EForgetLetsACorrectedEventRun(t *testing.T) {
	f := start(t, 10)
	first := sqsBatch(t, [2]string{"m1", `{"id":"order-9","action":"refund","amount":100}`})
	corrected := sqsBatch(t, [2]string{"m2", `{"id":"order-9","action":"refund","amount":10}`})
	if ids := f.sqs(first); len(ids) != 0 {
		t.Fatal(ids)
	}
	if ids := f.sqs(corrected); len(ids) != 0 {
		t.Fatal(ids)
	}
	out, _, code := f.ctl("", "list", "--poison", "--reason", "key_reused")
	if code != 0 || !strings.Contains(out, "m2") || !strings.Contains(out, "evt:order-9:refund") {
		t.Fatalf("list --poison: exit %d\n%s\nwant the corrected message's note, naming its key", code, out)
	}
	body := filepath.Join(t.TempDir(), "corrected.json")
	if err := os.WriteFile(body, []byte(`{"id":"order-9","action":"refund","amount":10}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := f.ctl("", "get", "--body", body); !strings.Contains(out, "DIFFERS from the stored fingerprint") {
		t.Errorf("get --body of the corrected event:\n%s\nwant it to say the payload differs", out)
	}
	// Without the flag: refused, and the event is not run again.
	if out, errOut, code := f.ctl("", "forget", "--id", "order-9", "--action", "refund", "--reason", "amount corrected"); code != opsctl.ExitRefused ||
		!strings.Contains(out, "--rerun-succeeded") {
		t.Fatalf("forget of the SUCCEEDED record without --rerun-succeeded: exit %d\n%s%s\nwant refused (3), naming the flag", code, out, errOut)
	}
	if ids := f.sqs(corrected); len(ids) != 0 || f.down.Count("evt:order-9:refund") != 1 {
		t.Fatalf("after the refused forget: failures %v, %d deliveries; want none, still 1", ids, f.down.Count("evt:order-9:refund"))
	}
	if out, errOut, code := f.ctl("", "forget", "--id", "order-9", "--action", "refund", "--rerun-succeeded", "--reason", "amount corrected"); code != 0 ||
		!strings.Contains(out, "runs the action AGAIN") {
		t.Fatalf("forget --rerun-succeeded: exit %d\n%s%s\nwant forgotten, saying the action runs again", code, out, errOut)
	}
	if ids := f.sqs(corrected); len(ids) != 0 {
		t.Fatal(ids)
	}
	if got := f.down.Statuses("evt:order-9:refund"); !slices.Equal(got, []int{202, 202}) {
		t.Errorf("downstream answered %v, want [202 202]: the first event, then the corrected one", got)
	}
	if out, _, code := f.ctl("", "get", "--body", body); code != 0 || !strings.Contains(out, "matches the stored one") {
		t.Errorf("get --body after the corrected run: exit %d\n%s", code, out)
	}
}

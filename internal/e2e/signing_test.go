package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

// envVerifier is the Python with PyPI's standardwebhooks (make test sets it).
const envVerifier = "IDEM_TEST_WEBHOOK_VERIFIER"

type verdict struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// verifierPython returns the Python with PyPI's standardwebhooks and
// stripe; the test skips without it, or fails under envRequire.
func verifierPython(t *testing.T) string {
	t.Helper()
	python := os.Getenv(envVerifier)
	if python == "" {
		if os.Getenv(envRequire) != "" {
			t.Fatalf("%s is required (make test sets it)", envVerifier)
		}
		t.Skipf("set %s to a Python with standardwebhooks and stripe (make test does)", envVerifier)
	}
	return python
}

// verify checks deliveries with the Standard Webhooks reference library for
// Python: a verifier written by someone else.
func verify(t *testing.T, secret string, cases map[string]verifyCase) map[string]verdict {
	t.Helper()
	python := verifierPython(t)
	var in bytes.Buffer
	for name, c := range cases {
		line, _ := json.Marshal(map[string]any{"name": name, "secret": secret, "headers": c.headers,
			"body_b64": base64.StdEncoding.EncodeToString(c.body), "received_after_s": c.after})
		in.Write(append(line, '\n'))
	}
	cmd := exec.Command(python, "../../tools/verify_webhooks.py")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("verifier: %v\n%s", err, stderr.String())
	}
	got := map[string]verdict{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var v verdict
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("verifier said %q", line)
		}
		got[v.Name] = v
	}
	return got
}

type verifyCase struct {
	headers map[string]string
	body    []byte
	after   int // seconds after sending that the receiver verifies
}

// Every delivery the function sends verifies with the reference library;
// a tampered body and a stale (replayed) delivery do not.
func TestE2EDeliveriesVerifyWithStandardWebhooks(t *testing.T) {
	f := start(t, 10)
	f.down.Script("evt:signed-2:notify", fakewebhook.Reply{Status: 503, RetryAfter: "60"})
	f.sqs(sqsBatch(t, [2]string{"m1", `{"id":"signed-1","action":"notify","n":1}`}, [2]string{"m2", `{"id":"signed-2","action":"notify"}`}))
	f.sqs(sqsBatch(t, [2]string{"m3", `{"id":"signed-2","action":"notify"}`}))
	deliveries := f.down.Audit()
	if len(deliveries) != 3 {
		t.Fatalf("%d deliveries; want 3", len(deliveries))
	}
	cases := map[string]verifyCase{}
	for i, d := range deliveries {
		if d.Headers["webhook-id"] != d.Headers["Idempotency-Key"] || !strings.HasPrefix(d.Headers["webhook-signature"], "v1,") {
			t.Errorf("delivery %d headers %v; want webhook-id equal to Idempotency-Key and a v1 signature", i, d.Headers)
		}
		cases["delivery-"+string(rune('1'+i))] = verifyCase{headers: d.Headers, body: d.Body}
	}
	first := deliveries[0]
	cases["tampered-body"] = verifyCase{headers: first.Headers, body: bytes.Replace(first.Body, []byte("notify"), []byte("notifz"), 1)}
	cases["stale-replay"] = verifyCase{headers: first.Headers, body: first.Body, after: 600}
	got := verify(t, f.secret, cases)
	for name := range cases {
		wantOK := strings.HasPrefix(name, "delivery-")
		if v, ok := got[name]; !ok || v.OK != wantOK {
			t.Errorf("%s: verified %v (%s); want %v", name, v.OK, v.Error, wantOK)
		}
	}
	// The secret appears nowhere in the function's output or records.
	raw := strings.TrimPrefix(f.secret, "whsec_")
	if strings.Contains(f.emu.Log(), raw) {
		t.Errorf("the signing secret appears in the function's output")
	}
	for _, key := range []string{"evt:signed-1:notify", "evt:signed-2:notify"} {
		if item, _ := json.Marshal(f.record(key)); strings.Contains(string(item), raw) {
			t.Errorf("the signing secret appears in the record for %s", key)
		}
	}
}

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// operatingDoc is the page whose walkthrough TestE2EOperatingWalkthrough runs.
const operatingDoc = "../../docs/operating.md"

// walkthroughCommands returns the shell blocks of the doc's walkthrough,
// in order, as written.
func walkthroughCommands(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(operatingDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## A walkthrough")
	if !ok {
		t.Fatalf("%s has no walkthrough section", operatingDoc)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var blocks []string
	for rest := section; ; {
		_, after, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			break
		}
		block, tail, _ := strings.Cut(after, "```")
		blocks = append(blocks, block)
		rest = tail
	}
	if len(blocks) < 6 {
		t.Fatalf("found %d shell blocks in the walkthrough; want them all", len(blocks))
	}
	return blocks
}

// stack is devstack running, as make stack runs it.
type stack struct {
	cmd *exec.Cmd
	out *syncBuffer
	dir string // its -dir: the env file and the function's log
}

// syncBuffer is a buffer the process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startStack runs devstack with the environment given (besides moto's
// endpoints and dummy credentials) and waits until its env file is
// written, or it exits.
func startStack(t *testing.T, env ...string) (*stack, error) {
	t.Helper()
	if bootstrap == "" {
		if os.Getenv(envRequire) != "" {
			t.Fatalf("%s and the moto endpoint are required (make test sets them)", envRIE)
		}
		t.Skipf("set %s and run under tools/with-moto.sh (make test does) to run the end-to-end tests", envRIE)
	}
	s := &stack{out: &syncBuffer{}, dir: t.TempDir()}
	s.cmd = exec.Command(devstack, "-rie", os.Getenv(envRIE), "-bootstrap", bootstrap, "-dir", s.dir, "-bin", filepath.Dir(devstack))
	// Only what make stack passes: the PATH, moto's endpoints and
	// credentials (with-moto.sh), and the function's variables given.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name == "PATH" || name == "HOME" || strings.HasPrefix(name, "AWS_") {
			s.cmd.Env = append(s.cmd.Env, kv)
		}
	}
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("devstack's output:\n%s", s.out)
			if log, err := os.ReadFile(filepath.Join(s.dir, "function.log")); err == nil {
				t.Logf("the function's log:\n%s", log)
			}
		}
	})
	// Generous: the first invoke builds nothing but starts the runtime,
	// on a machine other tests keep busy.
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			if err == nil {
				err = errStackExited
			}
			return s, err
		default:
		}
		if _, err := os.Stat(filepath.Join(s.dir, "env")); err == nil {
			return s, nil
		}
	}
	t.Fatalf("devstack wrote no env file in 3 minutes:\n%s", s.out)
	return nil, nil
}

var errStackExited = errors.New("devstack exited 0 before writing its env file")

// TestE2EOperatingWalkthrough runs every command of docs/operating.md's
// walkthrough, as written, on the stack make stack starts (devstack, the
// real bootstrap under the emulator, moto): with nothing but what the
// project builds on the PATH (no aws CLI, no jq, no curl), every command
// exits 0, and the downstream sees what the page says: each refund once
// more after its release, the corrected notification run again only
// through forget --rerun-succeeded.
func TestE2EOperatingWalkthrough(t *testing.T) {
	table := "oncely-walkthrough-" + randomHex(4)
	s, err := startStack(t, "IDEMPOTENCY_TABLE="+table, "IDEMPOTENCY_TTL=48h")
	if err != nil {
		t.Fatalf("devstack: %v\n%s", err, s.out)
	}
	for _, want := range []string{`IDEMPOTENCY_TABLE +` + table + ` +\(your environment\)`, `IDEMPOTENCY_TTL +48h +\(your environment\)`, `DOWNSTREAM_URL +http://\S+ +\(the stack's fake downstream\)`} {
		if !regexp.MustCompile(want).MatchString(s.out.String()) {
			t.Errorf("devstack does not say the function runs with %s:\n%s", want, s.out)
		}
	}
	tmp := t.TempDir()
	script := "set -euo pipefail\n" + strings.Join(walkthroughCommands(t), "") + "devstack deliveries\n"
	script = strings.ReplaceAll(script, "/tmp/", tmp+"/")
	script = strings.ReplaceAll(script, ".tools/stack/env", filepath.Join(s.dir, "env"))
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = "../.."
	// An empty PATH: no aws CLI, no jq, no curl, nothing but bash's
	// builtins; the env file adds the project's bin.
	empty := t.TempDir()
	cmd.Env = []string{"PATH=" + empty, "HOME=" + tmp, "USER=walkthrough"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the walkthrough failed (%v):\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var deliveries map[string][]int
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &deliveries); err != nil {
		t.Fatalf("the last line is not devstack deliveries' JSON (%v):\n%s", err, out.String())
	}
	for key, want := range map[string][]int{
		"evt:order-1001:refund": {422, 202}, "evt:order-1002:refund": {422, 202}, "evt:order-1003:refund": {422, 202},
		"evt:order-1004:notify": {202, 202}, // the original, then the corrected one after forget --rerun-succeeded
	} {
		if got := deliveries[key]; !slices.Equal(got, want) {
			t.Errorf("%s: the downstream answered %v, want %v", key, got, want)
		}
	}
	if got := deliveries["evt:order-1010:notify"]; len(got) < 2 || got[len(got)-1] != 202 || slices.Index(got, 202) != len(got)-1 {
		t.Errorf("the outage's event: the downstream answered %v, want 503s, then one 202", got)
	}
	for _, want := range []string{
		`re-send: 3 released records were permanent failures of SQS events`,
		`evt:order-1004:notify +KEY_REUSED`,
		`would forget +evt:order-1004:notify +was SUCCEEDED, 1 attempt; its next delivery runs the action AGAIN`,
		`payload +the body's fingerprint matches the stored one`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("the walkthrough's output lacks %s:\n%s", want, out.String())
		}
	}
}

// TestE2EStackRefusesWhatTheFunctionRefuses: IDEMPOTENCY_TTL=forever make
// stack used to start a stack that ignored it. The stack now stops, exit 1,
// with the very line the bootstrap prints when its init refuses the same
// value; and a failure only the running init finds (a signing secret that
// does not exist) stops it with the function's own log.
func TestE2EStackRefusesWhatTheFunctionRefuses(t *testing.T) {
	s, err := startStack(t, "IDEMPOTENCY_TTL=forever")
	if err == nil {
		t.Fatalf("devstack started with IDEMPOTENCY_TTL=forever:\n%s", s.out)
	}
	// The bootstrap itself, with the same value: its init's one line.
	fn := exec.Command(bootstrap)
	fn.Env = []string{"IDEMPOTENCY_TABLE=t", "DOWNSTREAM_URL=http://127.0.0.1:9/webhook", "WEBHOOK_SIGNING=off",
		"AWS_LAMBDA_FUNCTION_NAME=f", "IDEMPOTENCY_TTL=forever"}
	var stderr bytes.Buffer
	fn.Stderr = &stderr
	if err := fn.Run(); fn.ProcessState.ExitCode() != 1 {
		t.Fatalf("the bootstrap with IDEMPOTENCY_TTL=forever: %v, exit %d; want its init to fail", err, fn.ProcessState.ExitCode())
	}
	line := strings.TrimSpace(stderr.String())
	if s.cmd.ProcessState.ExitCode() != 1 || !strings.Contains(s.out.String(), "\n"+line+"\n") || !regexp.MustCompile(`IDEMPOTENCY_TTL +forever +\(your environment\)`).MatchString(s.out.String()) {
		t.Errorf("devstack: exit %d, output:\n%s\nwant exit 1, the value listed, and the function's line %q", s.cmd.ProcessState.ExitCode(), s.out, line)
	}

	// Its own table: moto is shared with the other tests (make stack's is not).
	s, err = startStack(t, "IDEMPOTENCY_TABLE=oncely-stack-"+randomHex(4), "WEBHOOK_SIGNING=on", "WEBHOOK_SECRET=oncely-no-such-secret-"+randomHex(4))
	if err == nil || s.cmd.ProcessState.ExitCode() != 1 || !strings.Contains(s.out.String(), "The function failed to start") ||
		!strings.Contains(s.out.String(), "config: WEBHOOK_SECRET") {
		t.Errorf("devstack with a missing signing secret: %v, output:\n%s\nwant exit 1 with the function's init failure", err, s.out)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

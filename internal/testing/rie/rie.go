// Package rie runs a bootstrap under the AWS Lambda Runtime Interface
// Emulator (the emulator `sam local` uses) on 127.0.0.1, for the demo, the
// end-to-end tests and the benchmarks.
//
// Measured quirks it works with: the emulator has no --help (unknown flags
// are ignored, the first positional argument is the bootstrap); it starts
// the bootstrap lazily on the first invoke; two concurrent invokes crash
// it, so Invoke serialises; handler errors and timeouts come back as HTTP
// 200 with a body to read; after a crash the next invoke starts a fresh
// runtime; the bootstrap runs in its own process group inside the
// emulator's session, so Stop ends the whole session.
//
// With AWS_LAMBDA_MAX_CONCURRENCY in its environment the emulator runs its
// Lambda Managed Instances mode instead (its source:
// internal/lambda-managed-instances), and behaves otherwise, as read in
// its source and checked by internal/e2e's managed-instances test: it runs
// only /var/runtime/bootstrap, /var/task/bootstrap or /opt/bootstrap
// (never the one on its command line), from /var/task, as uid 993 (so
// Start runs it as root in a mount namespace of its own, see
// managedCommand); it passes AWS_LAMBDA_MAX_CONCURRENCY on to the runtime
// and serves that many invocations at once to one runtime process; it
// starts the runtime at once, not on the first invoke; an invoke that finds no idle runtime
// worker is refused (400, Error-Type Runtime.Unavailable) instead of
// queued, which happens for a moment after each answer, until the worker
// asks for its next invocation (InvokeAs retries it); X-Amzn-RequestId
// sets the invocation's request id; an invocation past its deadline is
// answered with a timeout error but the runtime is not stopped, and its
// late answer is refused (410), which aws-lambda-go treats as fatal; when
// the runtime exits, the emulator shuts down and exits too (it never
// starts a new runtime). It copies the runtime's output line by line to
// its own standard output, among its own log lines (text, "time=..."),
// and defaults AWS_LAMBDA_LOG_FORMAT to "json", which aws-lambda-go's log
// handler does not recognise (it wants "JSON").
package rie

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Emulator is one running emulator.
type Emulator struct {
	URL       string // the invoke URL
	bootstrap string
	cmd       *exec.Cmd
	log       *lockedBuffer
	mu        sync.Mutex // one invoke at a time (the default mode)
	// slots bounds the invocations in flight in the managed-instances
	// mode (AWS_LAMBDA_MAX_CONCURRENCY); nil in the default mode.
	slots   chan struct{}
	client  *http.Client
	done    chan struct{}
	cleanup func() // removes what Start made, if anything
}

// Options start an emulator.
type Options struct {
	RIE       string   // path to aws-lambda-rie
	Bootstrap string   // path to the bootstrap
	Env       []string // the environment (the bootstrap inherits it)
	Log       io.Writer
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts the emulator on two free ports and waits until it listens.
func Start(o Options) (*Emulator, error) {
	if _, err := os.Stat(o.RIE); err != nil {
		return nil, fmt.Errorf("rie: emulator binary: %w (make installs it into .tools/bin)", err)
	}
	bootstrap, err := filepath.Abs(o.Bootstrap)
	if err != nil {
		return nil, err
	}
	p1, err := FreePort()
	if err != nil {
		return nil, err
	}
	p2, err := FreePort()
	if err != nil {
		return nil, err
	}
	for p2 == p1 {
		if p2, err = FreePort(); err != nil {
			return nil, err
		}
	}
	e := &Emulator{
		URL:       fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", p1),
		bootstrap: bootstrap,
		log:       &lockedBuffer{b: &bytes.Buffer{}},
		client:    &http.Client{},
		done:      make(chan struct{}),
	}
	if n := MaxConcurrency(o.Env); n > 0 {
		e.slots = make(chan struct{}, n)
		// One idle connection per slot, or each answer closes one.
		e.client.Transport = &http.Transport{MaxIdleConnsPerHost: n}
	}
	// Both addresses explicit: two emulators on the default 9001 crash.
	args := []string{
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", p1),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", p2),
		bootstrap,
	}
	e.cmd = exec.Command(o.RIE, args...)
	if e.slots != nil {
		if e.cmd, err = e.managedCommand(o.RIE, args); err != nil {
			return nil, err
		}
	}
	e.cmd.Env = o.Env
	var out io.Writer = e.log
	if o.Log != nil {
		out = io.MultiWriter(out, o.Log)
	}
	e.cmd.Stdout, e.cmd.Stderr = out, out
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := e.cmd.Start(); err != nil {
		if e.cleanup != nil {
			e.cleanup()
		}
		return nil, fmt.Errorf("rie: start: %w", err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p1), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			if e.cleanup != nil {
				e.cleanup()
			}
			return nil, fmt.Errorf("rie: the emulator exited at start:\n%s", e.Log())
		default:
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("rie: not listening after 15s:\n%s", e.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Log returns what the emulator and the bootstrap printed so far.
func (e *Emulator) Log() string {
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	return e.log.b.String()
}

// MaxConcurrency returns the AWS_LAMBDA_MAX_CONCURRENCY of env: the
// invocations the managed-instances mode serves at once, or 0 when it is
// not set (the default mode: one at a time).
func MaxConcurrency(env []string) int {
	n := 0
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "AWS_LAMBDA_MAX_CONCURRENCY="); ok {
			// Later entries win, as in the emulator's own environment.
			n, _ = strconv.Atoi(v)
			n = max(n, 1)
		}
	}
	return n
}

// Invoke sends one invocation and returns the function's response body.
// Errors and timeouts also come back as a body (errorMessage, or "Task
// timed out"); callers read it.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return e.InvokeAs(ctx, "", payload)
}

// InvokeAs is Invoke with the invocation's request id (Lambda's
// AwsRequestID; empty lets the emulator choose one). In the managed-
// instances mode up to AWS_LAMBDA_MAX_CONCURRENCY invocations run at once,
// and the ones beyond wait here for a slot; an invoke the emulator refuses
// for want of an idle worker is sent again.
func (e *Emulator) InvokeAs(ctx context.Context, requestID string, payload []byte) ([]byte, error) {
	if e.slots == nil {
		e.mu.Lock()
		defer e.mu.Unlock()
	} else {
		select {
		case e.slots <- struct{}{}:
			defer func() { <-e.slots }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		status, kind, body, err := e.post(ctx, requestID, payload)
		if err != nil || e.slots == nil || status != http.StatusBadRequest || kind != "Runtime.Unavailable" {
			return answer(status, body, err)
		}
		// The worker that answered last has not asked for its next
		// invocation yet: a moment, then again.
		select {
		case <-time.After(2 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("rie: invoke: no idle runtime worker: %w", ctx.Err())
		case <-e.done:
			return nil, fmt.Errorf("rie: invoke: the emulator exited:\n%s", e.Log())
		}
	}
}

func (e *Emulator) post(ctx context.Context, requestID string, payload []byte) (status int, errorType string, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(payload))
	if err != nil {
		return 0, "", nil, err
	}
	if requestID != "" {
		req.Header.Set("X-Amzn-RequestId", requestID)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, "", nil, fmt.Errorf("rie: invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Error-Type"), body, err
}

// answer is the body Invoke returns for an emulator's reply.
func answer(status int, body []byte, err error) ([]byte, error) {
	if err == nil && status >= 300 && len(bytes.TrimSpace(body)) == 0 {
		// The emulator answers a runtime that failed to start (or died
		// without a word) with a bare 502. Lambda reports that as a
		// function error, never as an empty, successful response (which an
		// event source mapping reads as "every record succeeded"): say so
		// in Lambda's own error shape.
		body = []byte(fmt.Sprintf(`{"errorType":"Runtime.Unavailable","errorMessage":"the emulator answered %d with no body: the runtime failed to start or died"}`, status))
	}
	return body, err
}

// managedCommand returns the command that runs the emulator's managed-
// instances mode on bootstrap (args' last). That mode ignores the
// bootstrap named on its command line: it runs the first of
// /var/runtime/bootstrap, /var/task/bootstrap and /opt/bootstrap, from
// /var/task, as uid 993 and gid 990 (Lambda's sandbox user, hard-coded in
// its process supervisor). So the emulator runs in a mount namespace of
// its own (unshare), where a directory holding task/bootstrap, a link to
// (or copy of) the bootstrap that the sandbox user can reach, is mounted
// over /var: the machine's /var is untouched, and emulators started at
// once each see their own. This needs root, as the emulator itself does
// in this mode.
func (e *Emulator) managedCommand(rieBin string, args []string) (*exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("rie: the managed-instances mode (AWS_LAMBDA_MAX_CONCURRENCY) starts the runtime as uid 993 and needs a mount namespace: run as root")
	}
	rieBin, err := filepath.Abs(rieBin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "oncely-rie-var")
	if err != nil {
		return nil, err
	}
	e.cleanup = func() { os.RemoveAll(dir) }
	task := filepath.Join(dir, "task")
	boot := filepath.Join(task, "bootstrap")
	if err = os.Chmod(dir, 0o755); err == nil {
		err = os.Mkdir(task, 0o755)
	}
	if err == nil && os.Link(e.bootstrap, boot) != nil {
		err = copyFile(e.bootstrap, boot)
	}
	if err != nil {
		e.cleanup()
		return nil, fmt.Errorf("rie: the managed-instances mode's /var: %w", err)
	}
	e.bootstrap = boot
	args = append(slices.Clone(args[:len(args)-1]), "/var/task/bootstrap")
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /var && exec "$@"`, dir, rieBin}, args...)...), nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// RuntimePID returns the pid of the running bootstrap, or 0 if none runs
// (in the default mode it starts on the first invoke).
func (e *Emulator) RuntimePID() int {
	boot, err := os.Stat(e.bootstrap)
	if err != nil {
		return 0
	}
	for _, pid := range sessionPIDs(e.cmd.Process.Pid) {
		// The file, not its path: in the managed-instances mode the
		// runtime sees it at /var/task/bootstrap.
		if exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && os.SameFile(exe, boot) {
			return pid
		}
	}
	return 0
}

// ProcessPID returns the pid of the emulator's process whose executable is
// exe (resolved, as /proc shows it), or 0: the runtime's pid when the
// bootstrap is a script that execs an interpreter.
func (e *Emulator) ProcessPID(exe string) int {
	for _, pid := range sessionPIDs(e.cmd.Process.Pid) {
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && got == exe {
			return pid
		}
	}
	return 0
}

// KillRuntime SIGKILLs the bootstrap, as a crash would.
func (e *Emulator) KillRuntime() error {
	pid := e.RuntimePID()
	if pid == 0 {
		return errors.New("rie: no runtime is running")
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// Stop ends the emulator and every process of its session.
func (e *Emulator) Stop() {
	sid := e.cmd.Process.Pid
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(3 * time.Second):
	}
	for range 50 {
		pids := sessionPIDs(sid)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	<-e.done
	if e.cleanup != nil {
		e.cleanup()
	}
}

// sessionPIDs lists the live (not zombie) processes in session sid.
func sessionPIDs(sid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		state, session, err := procState(pid)
		if err != nil || session != sid || state == "Z" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// procState reads a process's state and session from /proc/<pid>/stat.
func procState(pid int) (state string, session int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	// The command name is in parentheses and may hold spaces: split after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, fmt.Errorf("malformed stat for %d", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return "", 0, fmt.Errorf("short stat for %d", pid)
	}
	// Fields after the name start at field 3 (state): index = field-3.
	session, err = strconv.Atoi(f[3])
	return f[0], session, err
}

// Local describes the function run locally: the environment a bootstrap
// gets under the emulator, against a local DynamoDB and a local downstream.
type Local struct {
	DynamoDB string // endpoint of the local DynamoDB (moto)
	// SQS is the endpoint of the local SQS (moto), where the function
	// changes visibility. Empty means DynamoDB's (moto serves both): the
	// function's SQS calls never go to AWS.
	SQS string
	// SecretsManager is the endpoint of the local Secrets Manager (moto).
	// Empty means DynamoDB's.
	SecretsManager string
	// WebhookSecret is the Secrets Manager secret that signs deliveries;
	// empty turns signing off (WEBHOOK_SIGNING=off).
	WebhookSecret  string
	Table          string
	DownstreamURL  string
	Name           string // AWS_LAMBDA_FUNCTION_NAME, the default namespace
	TimeoutSeconds int    // AWS_LAMBDA_FUNCTION_TIMEOUT
	Extra          []string
}

// Env returns the environment: dummy credentials, the endpoint, the
// function's identity and timeout, its required variables, then Extra
// (later entries win).
func (l Local) Env() []string {
	sqs, secrets := cmp.Or(l.SQS, l.DynamoDB), cmp.Or(l.SecretsManager, l.DynamoDB)
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + l.DynamoDB, "AWS_ENDPOINT_URL_SQS=" + sqs,
		"AWS_LAMBDA_FUNCTION_NAME=" + l.Name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(l.TimeoutSeconds),
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + secrets,
		"IDEMPOTENCY_TABLE=" + l.Table,
		"DOWNSTREAM_URL=" + l.DownstreamURL,
	}
	if l.WebhookSecret == "" {
		env = append(env, "WEBHOOK_SIGNING=off")
	} else {
		env = append(env, "WEBHOOK_SECRET="+l.WebhookSecret)
	}
	return append(env, l.Extra...)
}

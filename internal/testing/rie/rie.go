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
package rie

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	mu        sync.Mutex // one invoke at a time
	client    *http.Client
	done      chan struct{}
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
	// Both addresses explicit: two emulators on the default 9001 crash.
	e.cmd = exec.Command(o.RIE,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", p1),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", p2),
		bootstrap)
	e.cmd.Env = o.Env
	var out io.Writer = e.log
	if o.Log != nil {
		out = io.MultiWriter(out, o.Log)
	}
	e.cmd.Stdout, e.cmd.Stderr = out, out
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := e.cmd.Start(); err != nil {
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

// Invoke sends one invocation and returns the function's response body.
// Errors and timeouts also come back as a body (errorMessage, or "Task
// timed out"); callers read it.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("rie: invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode >= 300 && len(bytes.TrimSpace(body)) == 0 {
		// The emulator answers a runtime that failed to start (or died
		// without a word) with a bare 502. Lambda reports that as a
		// function error, never as an empty, successful response (which an
		// event source mapping reads as "every record succeeded"): say so
		// in Lambda's own error shape.
		body = []byte(fmt.Sprintf(`{"errorType":"Runtime.Unavailable","errorMessage":"the emulator answered %d with no body: the runtime failed to start or died"}`, resp.StatusCode))
	}
	return body, err
}

// RuntimePID returns the pid of the running bootstrap, or 0 if none runs
// (it starts on the first invoke).
func (e *Emulator) RuntimePID() int {
	for _, pid := range sessionPIDs(e.cmd.Process.Pid) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == e.bootstrap {
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
	// WebhookSecret is the Secrets Manager secret (on the DynamoDB moto)
	// that signs deliveries; empty turns signing off (WEBHOOK_SIGNING=off).
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
	sqs := l.SQS
	if sqs == "" {
		sqs = l.DynamoDB
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(),
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + l.DynamoDB, "AWS_ENDPOINT_URL_SQS=" + sqs,
		"AWS_LAMBDA_FUNCTION_NAME=" + l.Name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(l.TimeoutSeconds),
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + l.DynamoDB,
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

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// The crash matrix (issue 15): the runtime is killed with SIGKILL at the
// moment the outcome is committed, for the ledger action (its entry
// commits in the record's transaction) and for notify (its webhook is sent
// before the record's completion). A proxy in front of DynamoDB stops the
// commit request and tells the test when to kill:
//
//	before: the commit request is held and never reaches DynamoDB
//	during: the commit request is held, the runtime killed, then the request
//	        delivered (it lands while its sender is dead)
//	after:  the commit lands, and the runtime is killed before the reply
//
// Each run then redelivers the event until it is acknowledged (after the
// dead owner's lease) and counts the side effects. `make test` runs each
// cell twice; `make crash` runs CRASH_RUNS (default 20) and prints the
// matrix.

var crashCells = []string{"before", "during", "after"}

// commitGate is the proxy. It intercepts the first commit request for key.
type commitGate struct {
	target *httputil.ReverseProxy
	moto   string
	key    string
	action string // "ledger" or "notify"
	cell   string

	mu      sync.Mutex
	caught  bool
	at      chan struct{} // closed when the commit is stopped
	release chan struct{} // closed by open, after the kill
	once    sync.Once
}

// open lets held requests go (once).
func (g *commitGate) open() { g.once.Do(func() { close(g.release) }) }

func newGate(t *testing.T, moto, key, action, cell string) (*commitGate, string) {
	u, err := url.Parse(moto)
	if err != nil {
		t.Fatal(err)
	}
	g := &commitGate{target: httputil.NewSingleHostReverseProxy(u), moto: moto, key: key, action: action, cell: cell,
		at: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	// Registered after Close, so it runs first: a test that fails before it
	// releases the gate must not leave Close waiting on a held request.
	t.Cleanup(g.open)
	return g, srv.URL
}

// isCommit reports whether req completes the record for the key: the
// transaction (ledger), or the UpdateItem that writes SUCCEEDED (notify).
func (g *commitGate) isCommit(req *http.Request, body []byte) bool {
	if !bytes.Contains(body, []byte(g.key)) {
		return false
	}
	switch ddblocal.Operation(req) {
	case "TransactWriteItems":
		return g.action == "ledger"
	case "UpdateItem":
		return g.action == "notify" && bytes.Contains(body, []byte(`"SUCCEEDED"`))
	}
	return false
}

func (g *commitGate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	g.mu.Lock()
	first := !g.caught && g.isCommit(req, body)
	if first {
		g.caught = true
	}
	g.mu.Unlock()
	if !first {
		g.target.ServeHTTP(w, req)
		return
	}
	switch g.cell {
	case "before":
		close(g.at)
		<-g.release // the sender is dead; the request is dropped
		panic(http.ErrAbortHandler)
	case "during":
		close(g.at)
		<-g.release
		g.forward(req, body) // lands after its sender died
		panic(http.ErrAbortHandler)
	default: // after
		g.forward(req, body)
		close(g.at)
		<-g.release
		panic(http.ErrAbortHandler) // the reply is lost with its reader
	}
}

// forward sends the held request to DynamoDB itself.
func (g *commitGate) forward(req *http.Request, body []byte) {
	out, err := http.NewRequest(req.Method, g.moto+req.URL.Path, bytes.NewReader(body))
	if err != nil {
		return
	}
	out.Header = req.Header.Clone()
	if resp, err := http.DefaultClient.Do(out); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// crashResult is what one run left behind.
type crashResult struct {
	effects int // ledger entries, or webhook deliveries
	status  string
}

// crashRun kills the runtime at the cell's moment and redelivers until the
// event is acknowledged.
func crashRun(t *testing.T, action, cell string, run int) crashResult {
	t.Helper()
	moto := ddblocal.MotoEndpoint(t)
	id := fmt.Sprintf("crash-%s-%s-%d-%d", action, cell, run, time.Now().UnixNano())
	key := "evt:" + id + ":" + action
	body := fmt.Sprintf(`{"id":%q,"action":%q,"amount":"12.50"}`, id, action)
	gate, proxy := newGate(t, moto, key, action, cell)
	env := []string{"ACTION=" + action, "AWS_ENDPOINT_URL_DYNAMODB=" + proxy}
	var ledgerTable string
	if action == "ledger" {
		client, _ := ddblocal.Client(ddblocal.Config(moto, nil))
		ledgerTable = ddblocal.NewTable(t, client)
		env = append(env, "LEDGER_TABLE="+ledgerTable)
	}
	const timeout = 2 // seconds: the lease a dead owner holds
	f := start(t, timeout, env...)
	// Deliver until one delivery reaches the commit: on a loaded machine a
	// cold start can leave the first invocation too little time to start
	// the record (DEADLINE), and SQS would simply deliver it again.
	reached := false
	for delivery := 0; !reached; delivery++ {
		if delivery == 10 {
			t.Fatalf("%s/%s: no delivery reached the commit:\n%s", action, cell, f.emu.Log())
		}
		invoked := make(chan []byte, 1)
		go func() {
			b, _ := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body}))
			invoked <- b
		}()
		select {
		case <-gate.at:
			reached = true
			if err := f.emu.KillRuntime(); err != nil {
				t.Fatal(err)
			}
			<-invoked
		case <-invoked:
			time.Sleep(200 * time.Millisecond)
		}
	}
	gate.open()
	// Redeliver until acknowledged; a redelivery inside the dead owner's
	// lease finds IN_PROGRESS and goes back, as SQS would bring it back.
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatalf("%s/%s: not acknowledged after 20 redeliveries:\n%s", action, cell, f.emu.Log())
		}
		// The one invocation error allowed: a redelivery that times out
		// while the runtime restarted after the kill is still in its init
		// (2 s is short for a cold start on a loaded machine: "Task timed
		// out after 2.00 seconds" was seen); SQS would deliver the batch
		// again, and so does this loop. Any other error, a timeout after
		// the init included, is a deadline the function overran: it fails.
		logFrom := len(f.emu.Log())
		raw, err := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{fmt.Sprintf("m%d", attempt+2), body}))
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			BatchItemFailures []struct{ ItemIdentifier string } `json:"batchItemFailures"`
			ErrorType         string                            `json:"errorType"`
		}
		if json.Unmarshal(raw, &resp) == nil && resp.ErrorType == "" && len(resp.BatchItemFailures) == 0 {
			break
		}
		if resp.ErrorType != "" || !json.Valid(raw) {
			// The emulator's line about the failure may reach its output
			// after the answer: wait for it (bounded) before judging.
			var emulated string
			for wait := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				emulated = f.emu.Log()[logFrom:]
				if strings.Contains(emulated, "errResetReceived") || time.Now().After(wait) {
					break
				}
			}
			if !initTimedOut(raw, emulated) {
				t.Fatalf("%s/%s redelivery %d: the invocation failed (%q), and not by a timeout in the restarted runtime's init; the emulator's output meanwhile:\n%s", action, cell, attempt, raw, emulated)
			}
			t.Logf("%s/%s redelivery %d: timed out in the restarted runtime's init; delivering again", action, cell, attempt)
		}
		time.Sleep(500 * time.Millisecond)
	}
	res := crashResult{status: s(f.record(key), "status")}
	if action == "ledger" {
		out, err := f.client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(ledgerTable)})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range out.Items {
			if v, ok := item["pk"].(*types.AttributeValueMemberS); ok && v.Value == key {
				res.effects++
			}
		}
	} else {
		res.effects = f.down.Count(key)
	}
	return res
}

// initTimedOut reports whether an invocation answered raw timed out while
// the runtime it started was still in its init, by what the emulator
// printed meanwhile (emulated). The emulator tells the two timeouts apart:
// in an init it prints "Init failed InvokeID= error=errResetReceived" and
// never starts the invocation (no "INVOKE START"); once the invocation has
// started it prints "Invoke failed error=errResetReceived InvokeID=<id>".
func initTimedOut(raw []byte, emulated string) bool {
	if !strings.Contains(string(raw), "Task timed out") || strings.Contains(emulated, "INVOKE START") {
		return false
	}
	for _, line := range strings.Split(emulated, "\n") {
		if strings.Contains(line, "Init failed") && strings.Contains(line, "errResetReceived") {
			return true
		}
	}
	return false
}

func crashRuns() int {
	if n, err := strconv.Atoi(os.Getenv("CRASH_RUNS")); err == nil && n > 0 {
		return n
	}
	return 2
}

// TestE2ECrashMatrix pins what each cell must give: the ledger entry
// exactly once in every cell; notify's webhook twice when the crash comes
// after the delivery and before the completion landed (the documented
// window), once otherwise.
func TestE2ECrashMatrix(t *testing.T) {
	runs := crashRuns()
	var report strings.Builder
	fmt.Fprintf(&report, "crash matrix, %d runs per cell: side effects per event (ledger entries / webhook deliveries)\n", runs)
	fmt.Fprintf(&report, "%-8s %-8s %s\n", "action", "cell", "effects per run")
	for _, action := range []string{"ledger", "notify"} {
		for _, cell := range crashCells {
			want := 1
			if action == "notify" && cell == "before" {
				want = 2 // delivered, then the completion never landed: the re-run delivers again
			}
			var got []int
			for run := range runs {
				res := crashRun(t, action, cell, run)
				got = append(got, res.effects)
				if res.status != "SUCCEEDED" {
					t.Errorf("%s/%s run %d: record %s; want SUCCEEDED", action, cell, run, res.status)
				}
				if res.effects != want {
					t.Errorf("%s/%s run %d: %d side effects; want %d", action, cell, run, res.effects, want)
				}
			}
			fmt.Fprintf(&report, "%-8s %-8s %v\n", action, cell, got)
		}
	}
	t.Log("\n" + report.String())
	if path := os.Getenv("CRASH_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestInitTimedOutTellsTheRestartedInitApart checks the crash matrix's
// one allowed error against the emulator's own output for each timeout
// (captured from it): a timeout in the init, and one after the init.
func TestInitTimedOutTellsTheRestartedInitApart(t *testing.T) {
	const inInit = `[INFO] (rapid) INIT START(type: on-demand, phase: invoke)
[INFO] (rapid) INIT RTDONE(status: error)
[INFO] (rapid) INIT REPORT(durationMs: 1000.260000)
[ERROR] (rapid) Init failed InvokeID= error=errResetReceived
[WARNING] (rapid) Reset initiated: Timeout`
	const afterInit = `[INFO] (rapid) INIT START(type: on-demand, phase: invoke)
[INFO] (rapid) INIT RTDONE(status: success)
[INFO] (rapid) INIT REPORT(durationMs: 250.220000)
[INFO] (rapid) INVOKE START(requestId: 4918b9e2-6534-4f1e-827c-cf764658d230)
[ERROR] (rapid) Invoke failed error=errResetReceived InvokeID=4918b9e2-6534-4f1e-827c-cf764658d230
[WARNING] (rapid) Reset initiated: Timeout`
	const running = `[INFO] (rapid) INVOKE START(requestId: 4918b9e2-6534-4f1e-827c-cf764658d230)
[ERROR] (rapid) Invoke failed error=errResetReceived InvokeID=4918b9e2-6534-4f1e-827c-cf764658d230`
	timedOut := []byte("Task timed out after 2.00 seconds")
	for _, tt := range []struct {
		name     string
		raw      []byte
		emulated string
		want     bool
	}{
		{"a timeout in the restarted runtime's init", timedOut, inInit, true},
		{"a timeout after the init", timedOut, afterInit, false},
		{"a timeout in a running runtime", timedOut, running, false},
		{"another error in the init", []byte(`{"errorType":"Runtime.ExitError"}`), inInit, false},
	} {
		if got := initTimedOut(tt.raw, tt.emulated); got != tt.want {
			t.Errorf("%s: initTimedOut = %v; want %v", tt.name, got, tt.want)
		}
	}
}

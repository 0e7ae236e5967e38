package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

// TestE2EExitsBetweenInvocationsPastTheAbandonedBound runs the e2efaults
// bootstrap (cmd/handler/faults.go) with a bound of one abandoned action
// (E2E_MAX_ABANDONED=1), one invocation at a time: the first invocation
// whose action ignores its context is abandoned and the process goes on;
// the second passes the bound, so its answer is posted whole and the
// process exits right after it, between invocations; a fresh runtime
// serves what comes next. (The e2efaults bootstrap is the race-built one
// of the managed-instances test: as root only, as that test.)
func TestE2EExitsBetweenInvocationsPastTheAbandonedBound(t *testing.T) {
	f := startWith(t, fnOptions{timeout: 3, bootstrap: raceBootstrap(t), env: []string{"E2E_MAX_ABANDONED=1", "NOTIFY_TIMEOUT=2s", "GORACE=atexit_sleep_ms=0"}})
	ignoring := func(id string) string { return `{"id":"` + id + `","action":"notify","ignore_ms":30000}` }
	answer := func(raw []byte) []string {
		t.Helper()
		var resp struct {
			BatchItemFailures *[]struct{ ItemIdentifier string } `json:"batchItemFailures"`
			ErrorType         string                             `json:"errorType"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil || resp.ErrorType != "" || !strings.Contains(string(raw), `"batchItemFailures"`) {
			t.Fatalf("answered %q; want an SQS batch response", raw)
		}
		var ids []string
		if resp.BatchItemFailures != nil {
			for _, fl := range *resp.BatchItemFailures {
				ids = append(ids, fl.ItemIdentifier)
			}
		}
		return ids
	}
	raw, err := f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m-a", ignoring("ignore-ctx-a")}))
	if err != nil {
		t.Fatal(err)
	}
	if ids := answer(raw); !slices.Equal(ids, []string{"m-a"}) {
		t.Fatalf("the first abandoned record: failures %v; want it back to the queue", ids)
	}
	first := f.emu.RuntimePID()
	if first == 0 {
		t.Fatal("one action abandoned, at the bound: the runtime is gone; want it serving")
	}
	raw, err = f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m-b", ignoring("ignore-ctx-b")}, [2]string{"m-c", eventBody("calm-c")}))
	if err != nil {
		t.Fatal(err)
	}
	if ids := answer(raw); !slices.Equal(ids, []string{"m-b"}) {
		t.Fatalf("the invocation that passed the bound: failures %v; want its answer whole, only the abandoned record back", ids)
	}
	// The emulator says when its runtime process exits. (Lambda may hand
	// the process an invocation in the instant of its exit, which then
	// fails as a crash would: the test waits, so that this one does not.)
	waitFor(t, 30*time.Second, "the runtime did not exit after answering past the bound", func() bool {
		return strings.Contains(f.emu.Log(), "exiting between invocations") && strings.Contains(f.emu.Log(), "exited: exit status 0")
	})
	// The emulator reports a runtime's exit to the next invocation
	// (Runtime.ExitError, "Runtime exited without providing a reason"):
	// the batch comes back, nothing acknowledged; the one after it starts
	// a fresh runtime.
	raw, err = f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m-d", eventBody("calm-d")}))
	if err == nil && strings.Contains(string(raw), `"errorType":"Runtime.ExitError"`) {
		raw, err = f.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m-d", eventBody("calm-d")}))
	}
	if err != nil {
		t.Fatal(err)
	}
	if ids := answer(raw); len(ids) != 0 {
		t.Errorf("after the exit: failures %v; want the event acknowledged by a fresh runtime", ids)
	}
	if pid := f.emu.RuntimePID(); pid == 0 || pid == first {
		t.Errorf("after the exit the runtime is %d (was %d); want a fresh one", pid, first)
	}
}

// TestE2EManagedExitsOnceNoInvocationIsInFlight: under the emulator's
// managed-instances mode (eight invocations at once in one process), with
// a bound of one abandoned action, two abandoned actions pass it while six
// other invocations are in flight: the process goes on, and those six
// answer whole; once none is in flight, it exits (and the emulator with
// it, as that mode does).
func TestE2EManagedExitsOnceNoInvocationIsInFlight(t *testing.T) {
	down := fakewebhook.New()
	hs := httptest.NewServer(down)
	t.Cleanup(func() { down.Close(); hs.Close() })
	m := startManaged(t, "mx", fnOptions{down: down, downURL: hs.URL + "/webhook", name: "oncely-mi-exit",
		env: []string{"E2E_MAX_ABANDONED=1", "GORACE=atexit_sleep_ms=0"}})
	pid := m.emu.RuntimePID()
	ignored := make([]*call, 2)
	ignoredDone := make(chan struct{})
	go func() {
		parallel(len(ignored), func(i int) {
			ignored[i] = m.sqs([2]string{fmt.Sprintf("m-ign-%d", i), fmt.Sprintf(`{"id":"ignore-ctx-x%d","action":"notify","ignore_ms":30000}`, i)})
		})
		close(ignoredDone)
	}()
	// Six invocations held at the downstream, sent while the two run: in
	// flight when those two are abandoned (about 7 s after they were sent)
	// and well inside their own work deadline when released.
	time.Sleep(3 * time.Second)
	hold := make(chan struct{})
	held := make([]*call, 6)
	heldDone := make(chan struct{})
	for i := range held {
		down.Script(eventKey(fmt.Sprintf("exit-held-%d", i)), fakewebhook.Reply{Hold: hold})
	}
	go func() {
		parallel(len(held), func(i int) {
			held[i] = m.sqs([2]string{fmt.Sprintf("m-held-%d", i), eventBody(fmt.Sprintf("exit-held-%d", i))})
		})
		close(heldDone)
	}()
	<-ignoredDone
	for i, c := range ignored {
		if ids, err := c.failures(); err != nil || !slices.Equal(ids, []string{fmt.Sprintf("m-ign-%d", i)}) {
			t.Errorf("an invocation whose action ignores its context: failures %v, %v; want its record back to the queue", ids, err)
		}
	}
	n := 0
	for i := range held {
		n += down.Count(eventKey(fmt.Sprintf("exit-held-%d", i)))
	}
	if n != len(held) {
		t.Fatalf("%d of the %d invocations meant to be in flight were held when the two were abandoned; the test proves nothing", n, len(held))
	}
	if got := m.emu.RuntimePID(); got != pid || strings.Contains(m.emu.Log(), "exiting between invocations") {
		t.Fatalf("past the bound with six invocations in flight, the runtime is %d (was %d): it exited; want it serving", got, pid)
	}
	close(hold)
	<-heldDone
	for _, c := range held {
		if ids, err := c.failures(); err != nil || len(ids) != 0 {
			t.Errorf("an invocation in flight past the bound: failures %v, %v; want it answered whole", ids, err)
		}
	}
	waitFor(t, 30*time.Second, "the runtime did not exit once no invocation was in flight", func() bool {
		return m.emu.RuntimePID() == 0 && strings.Contains(m.emu.Log(), "exiting between invocations")
	})
}

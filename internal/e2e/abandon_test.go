package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestE2EExitsBetweenInvocationsPastTheAbandonedBound runs the e2efaults
// bootstrap (cmd/handler/faults.go) with a bound of one abandoned action
// (E2E_MAX_ABANDONED=1), one invocation at a time: the first invocation
// whose action ignores its context is abandoned and the process goes on;
// the second passes the bound, so its answer is posted whole and the
// process exits right after it, between invocations; a fresh runtime
// serves what comes next.
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

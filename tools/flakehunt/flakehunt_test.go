package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSelectFollowsCallsToWhatStartsAServerOrWaits(t *testing.T) {
	got, err := selectTests("testdata/sample", []string{"sample.go"}, []string{"sample_test.go"})
	if err != nil {
		t.Fatal(err)
	}
	want := []testFunc{
		{"TestDeadlineInTheTest", "waits on time (context.WithTimeout)"},
		{"TestPollsThroughAMethod", "waits on time (time.Sleep)"},
		{"TestPure", ""},
		{"TestServer", "starts a server or process (httptest.NewServer)"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("selection (-want +got):\n%s", diff)
	}
}

// A -count=2 stream: one pass, one failure with a subtest's output, one
// test the binary died in.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"first run\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestA/sub"}
{"Action":"output","Package":"p","Test":"TestA/sub","Output":"delivery 5: received 0 messages; want 1\n"}
{"Action":"fail","Package":"p","Test":"TestA/sub","Elapsed":0.5}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":2.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"started\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 1m0s\n"}
{"Action":"fail","Package":"p","Elapsed":60}
`

func TestConsumeTalliesEveryRunAndKeepsFailedOutput(t *testing.T) {
	dir := t.TempDir()
	r := &runner{o: options{out: dir}, results: map[string]*Result{
		key("p", "TestA"): {Package: "p", Test: "TestA"},
		key("p", "TestB"): {Package: "p", Test: "TestB"},
	}}
	ran, other := r.consume("p", strings.NewReader(stream))
	if ran != 3 || !strings.Contains(other, "panic: test timed out") {
		t.Errorf("consume = %d runs, other output %q; want 3 runs and the panic", ran, other)
	}
	a, b := r.results[key("p", "TestA")], r.results[key("p", "TestB")]
	if a.Runs != 2 || a.Failures != 1 || a.Time != 4*time.Second || len(a.Logs) != 1 {
		t.Errorf("TestA: %+v; want 2 runs, 1 failure, 4s, one log", a)
	}
	if b.Runs != 1 || b.Failures != 1 || len(b.Logs) != 1 {
		t.Fatalf("TestB: %+v; want 1 run, 1 failure, one log", b)
	}
	for _, c := range []struct{ log, want string }{
		{a.Logs[0], "delivery 5: received 0 messages; want 1"},
		{b.Logs[0], "panic: test timed out"},
	} {
		text, err := os.ReadFile(c.log)
		if err != nil || !strings.Contains(string(text), c.want) || filepath.Dir(c.log) != dir {
			t.Errorf("%s: %q, %v; want it in %s, holding %q", c.log, text, err, dir, c.want)
		}
	}
}

func TestRunsForCapsSlowTests(t *testing.T) {
	o := options{count: 20, minCount: 3, perTest: 4 * time.Minute}
	for _, c := range []struct {
		run  time.Duration
		want int
	}{{0, 20}, {time.Second, 20}, {30 * time.Second, 8}, {5 * time.Minute, 3}} {
		if got := runsFor(c.run, o); got != c.want {
			t.Errorf("runsFor(%v) = %d; want %d", c.run, got, c.want)
		}
	}
}

func TestFitBudgetLowersThePerTestTime(t *testing.T) {
	o := options{count: 20, minCount: 3, perTest: 4 * time.Minute, parallel: 2, budget: 10 * time.Minute}
	firsts := []time.Duration{time.Second, 10 * time.Second, time.Minute}
	// Uncapped: 19 s + 190 s + 3 min = 389 s of runs, 195 s on two: it fits.
	if got := fitBudget(firsts, o); got != 4*time.Minute {
		t.Errorf("fitBudget = %v; want the -per-test 4m0s (it fits)", got)
	}
	o.budget = 2 * time.Minute // the minimum, 3 runs each, takes 71 s on two
	got := fitBudget(firsts, o)
	var sum time.Duration
	for _, d := range firsts {
		sum += time.Duration(runsFor(d, options{count: 20, minCount: 3, perTest: got})-1) * d
	}
	if sum/2 > o.budget || got <= 0 || got >= 4*time.Minute {
		t.Errorf("fitBudget = %v: the runs take %v on two; want at most %v", got, sum/2, o.budget)
	}
}

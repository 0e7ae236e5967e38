// Command flakehunt runs each test that starts a server or an emulator, or
// waits on time, many times while the machine's cores are kept busy, and
// reports the failures per test: a table of test, runs and failures, and
// the output of every failed run. `make flake-hunt` runs it under
// tools/with-moto.sh, with what make test sets, so that nothing skips; it
// is not part of make test.
//
// A test is selected by reading its source: it, or a function of its
// package that it calls, uses a test-support package that starts a server
// (internal/testing/rie, ddblocal, sqslocal, esm, fakewebhook, faults,
// soak), an httptest server, a process, a listener, or time.Sleep, a timer,
// a ticker or a context deadline. -all selects every test.
//
// Every selected test runs once first; a test whose first run took long
// gets fewer runs (at least -min-count) so that it uses at most -per-test
// of machine time. Packages run -p at a time (make test runs two), so
// tests that share the moto servers meet as they do in make test.
//
//	go run ./tools/flakehunt [-count 20] [-busy 2] [-p 2] [-per-test 4m] [-run REGEX] [-list] [-before OLD.json] [packages]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	count, minCount, busy, parallel int
	perTest, budget                 time.Duration
	run                             *regexp.Regexp
	all, list, race                 bool
	out, before                     string
	patterns                        []string
}

func main() {
	var o options
	var run string
	flag.IntVar(&o.count, "count", 20, "runs per test")
	flag.IntVar(&o.minCount, "min-count", 3, "runs per test at least, however long a run takes")
	flag.DurationVar(&o.perTest, "per-test", 4*time.Minute, "machine time per test at most (counted from its first run), down to -min-count runs")
	flag.DurationVar(&o.budget, "budget", 0, "if set, lower -per-test so that the runs after the first pass take about this long")
	flag.IntVar(&o.busy, "busy", runtime.NumCPU(), "CPU hogs to keep the cores busy while the tests run (0: none)")
	flag.IntVar(&o.parallel, "p", 2, "packages tested at once (make test runs two)")
	flag.StringVar(&run, "run", "", "only the selected tests matching this regular expression")
	flag.BoolVar(&o.all, "all", false, "every test, not only those that start a server or wait on time")
	flag.BoolVar(&o.list, "list", false, "list the selected tests and why, and run nothing")
	flag.BoolVar(&o.race, "race", true, "build with -race, as make test does")
	flag.StringVar(&o.out, "out", ".tools/flakehunt", "where the report (report.md, results.json) and each failed run's output go")
	flag.StringVar(&o.before, "before", "", "a results.json of an earlier hunt: the report shows its failures beside this one's")
	flag.Parse()
	o.patterns = flag.Args()
	if len(o.patterns) == 0 {
		o.patterns = []string{"./..."}
	}
	if run != "" {
		re, err := regexp.Compile(run)
		if err != nil {
			fatalf("-run: %v", err)
		}
		o.run = re
	}
	if o.count < 1 || o.minCount < 1 || o.parallel < 1 || o.busy < 0 {
		fatalf("-count, -min-count and -p must be at least 1, -busy at least 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := hunt(ctx, o, os.Stdout); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "flakehunt: "+format+"\n", args...)
	os.Exit(1)
}

// pkg is one package with its selected tests.
type pkg struct {
	ImportPath, Dir                    string
	GoFiles, TestGoFiles, XTestGoFiles []string
	tests                              []testFunc
}

// Result is one test's tally.
type Result struct {
	Package  string        `json:"package"`
	Test     string        `json:"test"`
	Reason   string        `json:"reason"`
	Runs     int           `json:"runs"`
	Failures int           `json:"failures"`
	Skips    int           `json:"skips"`
	Time     time.Duration `json:"time_ns"` // all its runs together
	Logs     []string      `json:"logs,omitempty"`
}

func hunt(ctx context.Context, o options, w io.Writer) error {
	pkgs, err := listPackages(ctx, o)
	if err != nil {
		return err
	}
	if o.list {
		for _, p := range pkgs {
			for _, t := range p.tests {
				fmt.Fprintf(w, "%s\t%s\t%s\n", p.ImportPath, t.Name, t.Reason)
			}
		}
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	stopHogs := hogs(o.busy)
	defer stopHogs()
	started, load0 := time.Now(), loadavg()
	r := &runner{o: o, w: w, results: map[string]*Result{}}
	for _, p := range pkgs {
		for _, t := range p.tests {
			r.results[key(p.ImportPath, t.Name)] = &Result{Package: p.ImportPath, Test: t.Name, Reason: t.Reason}
		}
	}
	// First pass: every test once, which also measures each one.
	fmt.Fprintf(w, "flakehunt: %d tests in %d packages, %d CPU hogs; first pass\n", len(r.results), len(pkgs), o.busy)
	r.forEach(ctx, pkgs, func(p pkg) []job { return []job{{p, names(p.tests), 1}} })
	// Then the rest of each test's runs, tests of one count together.
	if o.budget > 0 {
		var firsts []time.Duration
		for _, res := range r.results {
			if res.Runs > 0 && res.Skips < res.Runs {
				firsts = append(firsts, res.Time/time.Duration(res.Runs))
			}
		}
		o.perTest = fitBudget(firsts, o)
		r.o = o
	}
	if o.count > 1 {
		fmt.Fprintf(w, "flakehunt: first pass done in %v; now up to %d runs each, at most %v per test\n", time.Since(started).Round(time.Second), o.count, o.perTest.Round(time.Second))
		r.forEach(ctx, pkgs, func(p pkg) []job {
			byCount := map[int][]string{}
			for _, t := range p.tests {
				res := r.results[key(p.ImportPath, t.Name)]
				if res.Runs == 0 || res.Skips == res.Runs {
					continue // it did not run (the package failed to build) or it skips
				}
				n := runsFor(res.Time/time.Duration(res.Runs), o) - res.Runs
				if n > 0 {
					byCount[n] = append(byCount[n], t.Name)
				}
			}
			var jobs []job
			for n, tests := range byCount {
				jobs = append(jobs, job{p, tests, n})
			}
			slices.SortFunc(jobs, func(a, b job) int { return b.count - a.count })
			return jobs
		})
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(w, "flakehunt: interrupted; the tally so far:\n")
	}
	return r.report(w, time.Since(started), load0)
}

// runsFor is how many runs a test gets whose run takes d.
func runsFor(d time.Duration, o options) int {
	if d <= 0 {
		return o.count
	}
	return max(o.minCount, min(o.count, int(o.perTest/d)))
}

// fitBudget returns the largest per-test time (at most o.perTest) whose
// remaining runs, for tests whose first runs took firsts, add up to at
// most o.budget of wall time with o.parallel packages at once.
func fitBudget(firsts []time.Duration, o options) time.Duration {
	total := func(cap time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range firsts {
			sum += time.Duration(runsFor(d, options{count: o.count, minCount: o.minCount, perTest: cap})-1) * d
		}
		return sum / time.Duration(o.parallel)
	}
	lo, hi := time.Duration(0), o.perTest
	if total(hi) <= o.budget {
		return hi
	}
	for hi-lo > time.Second {
		mid := (lo + hi) / 2
		if total(mid) <= o.budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func names(ts []testFunc) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// listPackages lists the packages and selects their tests.
func listPackages(ctx context.Context, o options) ([]pkg, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-json"}, o.patterns...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		tests, err := selectTests(p.Dir, p.GoFiles, append(p.TestGoFiles, p.XTestGoFiles...))
		if err != nil {
			return nil, err
		}
		for _, t := range tests {
			if (o.all || t.Reason != "") && (o.run == nil || o.run.MatchString(t.Name)) {
				if t.Reason == "" {
					t.Reason = "(-all)"
				}
				p.tests = append(p.tests, t)
			}
		}
		if len(p.tests) > 0 {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// A job is one go test run: tests of one package, count times each.
type job struct {
	p     pkg
	tests []string
	count int
}

type runner struct {
	o       options
	w       io.Writer // progress, a line per go test run
	mu      sync.Mutex
	results map[string]*Result
	seq     int
}

// forEach runs every package's jobs, o.parallel packages at a time.
func (r *runner) forEach(ctx context.Context, pkgs []pkg, jobs func(pkg) []job) {
	sem := make(chan struct{}, r.o.parallel)
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, j := range jobs(p) {
				if ctx.Err() != nil {
					return
				}
				r.run(ctx, j)
			}
		})
	}
	wg.Wait()
}

// event is go test -json's line.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// run runs one job and tallies every run of every test in it.
func (r *runner) run(ctx context.Context, j job) {
	args := []string{"test", "-json", fmt.Sprintf("-count=%d", j.count), "-timeout", "60m",
		"-run", "^(" + strings.Join(j.tests, "|") + ")$"}
	if r.o.race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, j.p.ImportPath)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // stop the test binary too
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.packageFailed(j, err.Error())
		return
	}
	if err := cmd.Start(); err != nil {
		r.packageFailed(j, err.Error())
		return
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		case <-done:
		}
	}()
	started := time.Now()
	ran, other := r.consume(j.p.ImportPath, stdout)
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		failed := 0
		for _, t := range j.tests {
			failed += r.results[key(j.p.ImportPath, t)].Failures
		}
		fmt.Fprintf(r.w, "flakehunt: %s: %d tests × %d: %d runs in %v; %d failed runs so far\n",
			j.p.ImportPath, len(j.tests), j.count, ran, time.Since(started).Round(time.Second), failed)
	}()
	if err := cmd.Wait(); err != nil && ran == 0 && ctx.Err() == nil {
		r.packageFailed(j, other)
	}
}

// consume tallies go test -json's stream of one package and returns how
// many runs it tallied, and the output that belongs to no test (build
// errors, a panic's goroutine dump).
func (r *runner) consume(pkgPath string, stream io.Reader) (int, string) {
	var other strings.Builder
	running := map[string]*strings.Builder{}
	ran := 0
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			other.WriteString(sc.Text() + "\n")
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		if top == "" {
			if e.Action == "output" {
				other.WriteString(e.Output)
			}
			continue
		}
		switch {
		case e.Action == "run" && top == e.Test:
			running[top] = &strings.Builder{}
		case e.Action == "output":
			if b := running[top]; b != nil {
				b.WriteString(e.Output)
			}
		case (e.Action == "pass" || e.Action == "fail" || e.Action == "skip") && top == e.Test:
			r.tally(pkgPath, top, e.Action, time.Duration(e.Elapsed*float64(time.Second)), running[top])
			delete(running, top)
			ran++
		}
	}
	// A test still running when the binary died (a panic, the timeout)
	// failed; its output and the package's tell why.
	for name, b := range running {
		b.WriteString("\n--- the test binary ended during this run:\n" + other.String())
		r.tally(pkgPath, name, "fail", 0, b)
		ran++
	}
	return ran, other.String()
}

func (r *runner) tally(pkgPath, test, action string, d time.Duration, out *strings.Builder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.results[key(pkgPath, test)]
	if res == nil {
		return // a test -run matched that was not selected
	}
	res.Runs++
	res.Time += d
	switch action {
	case "skip":
		res.Skips++
	case "fail":
		res.Failures++
		r.seq++
		name := fmt.Sprintf("%s.%s.%d.log", strings.ReplaceAll(filepath.Base(pkgPath), "/", "_"), test, r.seq)
		path := filepath.Join(r.o.out, name)
		text := ""
		if out != nil {
			text = out.String()
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err == nil {
			res.Logs = append(res.Logs, path)
		}
	}
}

// packageFailed counts one failed run for each test of a job whose go test
// produced no test at all (a build failure).
func (r *runner) packageFailed(j job, output string) {
	for _, t := range j.tests {
		b := &strings.Builder{}
		b.WriteString("go test ran no test:\n" + output)
		r.tally(j.p.ImportPath, t, "fail", 0, b)
	}
}

func (r *runner) report(w io.Writer, took time.Duration, load0 string) error {
	var before map[string]Result
	if r.o.before != "" {
		b, err := os.ReadFile(r.o.before)
		if err != nil {
			return err
		}
		var old []Result
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("%s: %w", r.o.before, err)
		}
		before = map[string]Result{}
		for _, o := range old {
			before[key(o.Package, o.Test)] = o
		}
	}
	var all []Result
	for _, res := range r.results {
		all = append(all, *res)
	}
	slices.SortFunc(all, func(a, b Result) int {
		if a.Failures != b.Failures {
			return b.Failures - a.Failures
		}
		if c := strings.Compare(a.Package, b.Package); c != 0 {
			return c
		}
		return strings.Compare(a.Test, b.Test)
	})
	js, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "results.json"), js, 0o644); err != nil {
		return err
	}
	var b strings.Builder
	runs, fails := 0, 0
	for _, res := range all {
		runs += res.Runs
		fails += res.Failures
	}
	fmt.Fprintf(&b, "# Flake hunt\n\n%d runs of %d tests, %d failed; %v with %d CPU hogs and %d packages at once (load average %s at the start, %s at the end).\n\n",
		runs, len(all), fails, took.Round(time.Second), r.o.busy, r.o.parallel, load0, loadavg())
	if before != nil {
		fmt.Fprintf(&b, "| package | test | runs before | failures before | runs | failures | why it was selected |\n|---|---|---|---|---|---|---|\n")
	} else {
		fmt.Fprintf(&b, "| package | test | runs | failures | why it was selected |\n|---|---|---|---|---|\n")
	}
	for _, res := range all {
		skips := ""
		if res.Skips > 0 {
			skips = fmt.Sprintf(" (%d skipped)", res.Skips)
		}
		pkgName := strings.TrimPrefix(res.Package, modulePrefix(res.Package))
		if before != nil {
			old, ok := before[key(res.Package, res.Test)]
			ob, of := "-", "-"
			if ok {
				ob, of = fmt.Sprint(old.Runs), fmt.Sprint(old.Failures)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %d%s | %d | %s |\n", pkgName, res.Test, ob, of, res.Runs, skips, res.Failures, res.Reason)
		} else {
			fmt.Fprintf(&b, "| %s | %s | %d%s | %d | %s |\n", pkgName, res.Test, res.Runs, skips, res.Failures, res.Reason)
		}
	}
	if fails > 0 {
		b.WriteString("\nThe output of each failed run:\n\n")
		for _, res := range all {
			for _, l := range res.Logs {
				fmt.Fprintf(&b, "- %s: %s\n", res.Test, l)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(r.o.out, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(w, b.String())
	if fails > 0 {
		return errors.New("some runs failed: see the table")
	}
	return nil
}

// modulePrefix is the module path with its slash, as go list reports it
// for this module's packages.
func modulePrefix(importPath string) string {
	if i := strings.Index(importPath, "/internal/"); i >= 0 {
		return importPath[:i+1]
	}
	if i := strings.Index(importPath, "/cmd/"); i >= 0 {
		return importPath[:i+1]
	}
	if i := strings.Index(importPath, "/tools/"); i >= 0 {
		return importPath[:i+1]
	}
	return ""
}

// hogs keeps n cores busy until the returned function is called.
func hogs(n int) func() {
	if n == 0 {
		return func() {}
	}
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), n+1))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for x := uint64(1); ; x = x*6364136223846793005 + 1442695040888963407 {
				if x&0xfffff == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		})
	}
	return func() { close(stop); wg.Wait() }
}

// loadavg is the 1-, 5- and 15-minute load averages, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

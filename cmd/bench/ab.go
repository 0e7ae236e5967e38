package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// abCompare runs sections 4 and 5 for two bootstraps under the same bench,
// alternating (new, old, then old, new, ...), so that a load change on a
// shared machine hits both, and writes the per-run figures.
func abCompare(ctx context.Context, moto, rieBin, boot, baseline, baselineName string, total, runs, starts int, out string) error {
	down, url, stop, err := serveDownstream()
	if err != nil {
		return err
	}
	defer stop()
	type side struct {
		name, boot string
		runs       []e2eRun
		cold       []float64
	}
	sides := []*side{{name: "new", boot: boot}, {name: "baseline", boot: baseline}}
	table, err := newTable(ctx, moto, "bench-ab-cold")
	if err != nil {
		return err
	}
	// The cold-start table needs its one event stored first.
	if _, err := coldStarts(ctx, moto, rieBin, boot, table, url, 0); err != nil {
		return err
	}
	for round := range runs {
		order := sides
		if round%2 == 1 {
			order = []*side{sides[1], sides[0]}
		}
		for _, sd := range order {
			r, err := runEndToEnd(ctx, moto, rieBin, sd.boot, url, total)
			if err != nil {
				return fmt.Errorf("%s: %w", sd.name, err)
			}
			sd.runs = append(sd.runs, r)
			cold, err := coldStarts(ctx, moto, rieBin, sd.boot, table, url, max(starts/runs, 2))
			if err != nil {
				return fmt.Errorf("%s: %w", sd.name, err)
			}
			sd.cold = append(sd.cold, cold...)
			fmt.Fprintf(os.Stderr, "bench: A/B round %d, %s: fresh %.3f ms, replay %.3f ms CPU/event, peak RSS %.1f MiB, cold start median %.2f ms\n",
				round+1, sd.name, r.freshCPU, r.replayCPU, r.rss, stats(cold).med)
		}
	}
	if got := down.Total(); got < total*runs*2 {
		return fmt.Errorf("downstream saw %d deliveries; want at least %d", got, total*runs*2)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Interleaved A/B: this bootstrap against a baseline\n\n")
	fmt.Fprintf(&b, "Rerun with `make bench-ab BENCH_BASE=%s BENCH_RUNS=%d BENCH_EVENTS=%d` (it builds the baseline's bootstrap from `git archive` of that commit).\n\n", cmp.Or(baselineName, "<commit>"), runs, total)
	fmt.Fprintf(&b, "- Measured: %s, on the same shared 2-core machine (other engineers' tests were running: figures are noisy, which is why the runs alternate).\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- Load average (1 min) at the start and the end: %s and %s, on %d cores.\n", startLoad, loadAverage(), runtime.NumCPU())
	fmt.Fprintf(&b, "- Each round runs section 4 (%d fresh events in batches of 10, then the same events again as replays, CPU from /proc/<pid>/stat) and %d cold starts of section 5 for each bootstrap, alternating which goes first.\n", total, max(starts/runs, 2))
	fmt.Fprintf(&b, "- Baseline: the bootstrap of %s; new: this tree's.\n\n", cmp.Or(baselineName, "`"+baseline+"`"))
	fmt.Fprintf(&b, "| round | bootstrap | CPU per fresh event | CPU per replayed event | peak RSS | events/s |\n|---|---|---|---|---|---|\n")
	for i := range runs {
		for _, sd := range sides {
			r := sd.runs[i]
			fmt.Fprintf(&b, "| %d | %s | %.3f ms | %.3f ms | %.1f MiB | %.0f |\n", i+1, sd.name, r.freshCPU, r.replayCPU, r.rss, r.rate)
		}
	}
	fmt.Fprintf(&b, "\n| bootstrap | CPU per fresh event, median (min–max) | CPU per replayed event | cold start |\n|---|---|---|---|\n")
	for _, sd := range sides {
		var fresh, replay []float64
		for _, r := range sd.runs {
			fresh, replay = append(fresh, r.freshCPU), append(replay, r.replayCPU)
		}
		f, r, c := stats(fresh), stats(replay), stats(sd.cold)
		fmt.Fprintf(&b, "| %s | %.3f ms (%.3f–%.3f) | %.3f ms (%.3f–%.3f) | %s |\n", sd.name, f.med, f.min, f.max, r.med, r.min, r.max, ms3(c))
	}
	fmt.Print(b.String())
	return writeSection(out, sectionAB, b.String())
}

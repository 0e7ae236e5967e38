package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/truora/minidyn/server"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/rie"
)

// --- 6. Lambda Managed Instances: several invocations at once in one process ---

// managedConcurrency is AWS_LAMBDA_MAX_CONCURRENCY for the section, and the
// invocations the benchmark keeps in flight.
const managedConcurrency = 8

// managedSetting is one runtime setting measured.
type managedSetting struct {
	name string
	env  []string
}

var managedSettings = []managedSetting{
	{"GOMAXPROCS left to Go (oncely's choice for this mode)", nil},
	{"GOMAXPROCS=1 (oncely's choice for one invocation at a time)", []string{"GOMAXPROCS=1"}},
}

// managedResult is one run of one setting.
type managedResult struct {
	rate, fresh, replay, cores, rss float64
	procs                           string // GOMAXPROCS as the bootstrap logged it
}

// managedInstances measures the bootstrap under the emulator's managed-
// instances mode: events per second and CPU with eight invocations in
// flight, for each setting, runs interleaved so that the machine's drift
// falls on both. The store is minidyn in this process (moto, one Python
// thread, would be the bound and hide the difference).
func managedInstances(ctx context.Context, rieBin, boot string, total, runs int) ([]figure, error) {
	sec := fmt.Sprintf("6. Lambda Managed Instances (%d invocations at once in one process)", managedConcurrency)
	if os.Geteuid() != 0 {
		// The emulator's managed-instances mode runs the runtime as uid 993.
		return []figure{{sec, "not measured", "needs root", "—", "skipped", "the emulator's managed-instances mode starts the runtime as uid 993 (see internal/testing/rie)"}}, nil
	}
	_, url, stop, err := serveDownstream()
	if err != nil {
		return nil, err
	}
	defer stop()
	ddb, stopDDB, err := serveMinidyn()
	if err != nil {
		return nil, err
	}
	defer stopDDB()
	results := make([][]managedResult, len(managedSettings))
	for run := range runs {
		for i, s := range managedSettings {
			r, err := managedRun(ctx, ddb, rieBin, boot, url, total, s.env)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", s.name, run+1, err)
			}
			results[i] = append(results[i], r)
			fmt.Fprintf(os.Stderr, "bench: managed instances, %s, run %d: %.0f events/s, fresh %.3f ms CPU/event (%.2f cores), replay %.3f ms CPU/event, peak RSS %.1f MiB, GOMAXPROCS %s\n",
				s.name, run+1, r.rate, r.fresh, r.cores, r.replay, r.rss, r.procs)
		}
	}
	how := fmt.Sprintf("real bootstrap under aws-lambda-rie's managed-instances mode (AWS_LAMBDA_MAX_CONCURRENCY=%d, %d invocations kept in flight), %d events in batches of 10 then the same again (replays), against minidyn's DynamoDB server in the benchmark's process (which shares the machine's cores with the bootstrap); CPU from /proc/<pid>/stat (utime+stime), cores = CPU seconds / wall seconds; settings interleaved, %d runs each, median (min–max)",
		managedConcurrency, managedConcurrency, total, runs)
	var figs []figure
	for i, s := range managedSettings {
		pick := func(f func(managedResult) float64) summary {
			v := make([]float64, len(results[i]))
			for j, r := range results[i] {
				v[j] = f(r)
			}
			return stats(v)
		}
		rate, fresh, replay, cores, rss := pick(func(r managedResult) float64 { return r.rate }), pick(func(r managedResult) float64 { return r.fresh }),
			pick(func(r managedResult) float64 { return r.replay }), pick(func(r managedResult) float64 { return r.cores }), pick(func(r managedResult) float64 { return r.rss })
		name := s.name + ", GOMAXPROCS " + results[i][0].procs
		figs = append(figs,
			figure{sec, name + ": throughput, fresh events", fmt.Sprintf("%.0f events/s (%.0f–%.0f)", rate.med, rate.min, rate.max), "—", "measured", how},
			figure{sec, name + ": CPU per fresh event", fmt.Sprintf("%.3f ms (%.3f–%.3f)", fresh.med, fresh.min, fresh.max), "—", "measured", how},
			figure{sec, name + ": CPU used while fresh events ran", fmt.Sprintf("%.2f cores (%.2f–%.2f)", cores.med, cores.min, cores.max), "—", "measured", how},
			figure{sec, name + ": CPU per replayed event", fmt.Sprintf("%.3f ms (%.3f–%.3f)", replay.med, replay.min, replay.max), "—", "measured", how},
			figure{sec, name + ": peak RSS of the bootstrap (VmHWM)", fmt.Sprintf("%.1f MiB (%.1f–%.1f)", rss.med, rss.min, rss.max), "—", "measured", how},
		)
	}
	return figs, nil
}

// serveMinidyn starts minidyn's DynamoDB server on a free port.
func serveMinidyn() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: server.NewServer(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// managedRun is one run: a fresh table and emulator, a warm-up, total fresh
// events with managedConcurrency invocations in flight, then their replays.
func managedRun(ctx context.Context, ddb, rieBin, boot, downURL string, total int, extra []string) (managedResult, error) {
	client := dynamodb.NewFromConfig(ddblocal.Config(ddb, nil))
	table := fmt.Sprintf("bench-managed-%d", time.Now().UnixNano())
	if _, err := ddbstore.CreateTable(ctx, client, table); err != nil && !errors.Is(err, ddbstore.ErrNoTTL) {
		return managedResult{}, err
	}
	emu, err := rie.Start(rie.Options{RIE: rieBin, Bootstrap: boot, Env: rie.Local{
		DynamoDB: ddb, Table: table, DownstreamURL: downURL, Name: "oncely-bench", TimeoutSeconds: 30,
		Extra: append([]string{"NOTIFY_TIMEOUT=5s", "AWS_LAMBDA_LOG_FORMAT=JSON", "AWS_LAMBDA_MAX_CONCURRENCY=" + strconv.Itoa(managedConcurrency)}, extra...),
	}.Env()})
	if err != nil {
		return managedResult{}, err
	}
	defer emu.Stop()
	// Warm up every invoke loop: first connections are not per-event costs.
	if err := inFlight(ctx, emu, -10*managedConcurrency, 10*managedConcurrency); err != nil {
		return managedResult{}, err
	}
	pid := emu.RuntimePID()
	if pid == 0 {
		return managedResult{}, errors.New("no runtime process")
	}
	cpu0, _ := cpuSeconds(pid)
	start := time.Now()
	if err := inFlight(ctx, emu, 0, total); err != nil {
		return managedResult{}, err
	}
	elapsed := time.Since(start)
	cpu1, _ := cpuSeconds(pid)
	if err := inFlight(ctx, emu, 0, total); err != nil {
		return managedResult{}, err
	}
	cpu2, _ := cpuSeconds(pid)
	peak, _ := peakRSS(pid)
	if pid != emu.RuntimePID() {
		return managedResult{}, errors.New("the runtime restarted during the run")
	}
	return managedResult{
		rate: float64(total) / elapsed.Seconds(), fresh: (cpu1 - cpu0) / float64(total) * 1000, replay: (cpu2 - cpu1) / float64(total) * 1000,
		cores: (cpu1 - cpu0) / elapsed.Seconds(), rss: float64(peak) / (1 << 20), procs: loggedMaxProcs(emu.Log()),
	}, nil
}

// inFlight sends events first..first+n in batches of 10, with
// managedConcurrency invocations in flight.
func inFlight(ctx context.Context, emu *rie.Emulator, first, n int) error {
	var next atomic.Int64
	var mu sync.Mutex
	var failed error
	var wg sync.WaitGroup
	for range managedConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(10)) - 10
				if i >= n {
					return
				}
				if err := invokeOK(ctx, emu, sqsPayload(first+i, min(10, n-i))); err != nil {
					mu.Lock()
					failed = cmp.Or(failed, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// loggedMaxProcs returns the gomaxprocs of the bootstrap's runtime settings
// line, or "?".
func loggedMaxProcs(log string) string {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Message    string  `json:"message"`
			GOMAXPROCS float64 `json:"gomaxprocs"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "runtime settings" {
			return strconv.Itoa(int(l.GOMAXPROCS))
		}
	}
	return "?"
}

package sqsbatch_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/worstcase"
	"github.com/oncely/oncely/keyexpr"
	"github.com/oncely/oncely/oncelytest"
	"github.com/oncely/oncely/sqsbatch"
)

// worstCaseHandler is the adapter with the Expr decoder and the default
// key expression, over the in-memory store, logging nowhere. Its body
// limit is above 1 MiB because the shapes are "about" 1 MiB: the decode is
// what is measured, not the size check.
func worstCaseHandler(tb testing.TB) *sqsbatch.Handler[json.RawMessage] {
	tb.Helper()
	engine, err := oncely.New(oncelytest.NewStore(), oncely.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := keyexpr.New("", "")
	if err != nil {
		tb.Fatal(err)
	}
	h, err := sqsbatch.New(engine, sqsbatch.Expr(keys), func(context.Context, json.RawMessage) ([]byte, oncely.Effects, error) {
		return nil, nil, nil
	}, sqsbatch.Options{MaxBodyBytes: 2 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// worstCaseEvent is a batch of one record whose body is body.
func worstCaseEvent(id int, body string) events.SQSEvent {
	return events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-" + strconv.Itoa(id), Body: body, EventSourceARN: arn}}}
}

// wantWorstCaseCode is what the adapter must note about a shape: none of
// them has an id and an action (KEY_MISSING), and the one nested past the
// fingerprint's limit is refused before its key is read (INVALID_PAYLOAD).
func wantWorstCaseCode(s worstcase.Shape) oncely.Code {
	if s.Deep {
		return oncely.CodeInvalidPayload
	}
	return idem.CodeKeyMissing
}

// TestWorstCaseBodiesAllocateLittleThroughTheAdapter sends a 1 MiB body of
// every worst-case shape (package worstcase) through Handler.Handle and
// checks its poison note's code and the bytes allocated
// (runtime.MemStats.TotalAlloc before and after): at most 4 times the
// body, fingerprint and key decode included, plus 64 KiB for the fixed
// parts (the batch, the engine, the note). The record path copies no body.
//
// The race detector changes what escapes to the heap, so the test skips
// under it.
func TestWorstCaseBodiesAllocateLittleThroughTheAdapter(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are measured without -race")
	}
	const limit = 4*worstcase.Size + 64<<10
	h := worstCaseHandler(t)
	for i, s := range worstcase.Shapes {
		ev := worstCaseEvent(i, s.Body(worstcase.Size))
		body := len(ev.Records[0].Body)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, results, err := h.Handle(context.Background(), ev)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if got, want := results[0].Code, wantWorstCaseCode(s); got != want || results[0].Label != "poison" {
			t.Errorf("%s: got %s (%s); want a poison note with %s", s.Name, got, results[0].Label, want)
		}
		if alloc > limit {
			t.Errorf("%s (%d bytes): %d bytes allocated through the adapter (%.1f× the body); want at most %d", s.Name, body, alloc, float64(alloc)/float64(body), limit)
		}
		t.Logf("%s: %d bytes, %d allocated", s.Name, body, alloc)
	}
}

// BenchmarkWorstCaseAdapter sends a 1 MiB body of each worst-case shape
// through Handler.Handle, one record per batch: the fingerprint, the key
// expression's decode and the poison note. Besides the wall time it
// reports the process's CPU time per record (cpu-ns/op):
//
//	go test -run '^$' -bench 'WorstCaseAdapter' -benchmem -benchtime 20x -count 5 ./sqsbatch/
func BenchmarkWorstCaseAdapter(b *testing.B) {
	h := worstCaseHandler(b)
	for _, s := range worstcase.Shapes {
		body := s.Body(worstcase.Size)
		want := wantWorstCaseCode(s)
		b.Run(worstcase.BenchName(s.Name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			i := 0
			start := cpuTime()
			for b.Loop() {
				i++
				_, results, err := h.Handle(context.Background(), worstCaseEvent(i, body))
				if err != nil || results[0].Code != want {
					b.Fatalf("got %v, %s; want %s", err, results[0].Code, want)
				}
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

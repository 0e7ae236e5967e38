package idem_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
)

// The engine's own cost per event, excluding I/O: key validation, the
// fingerprint of a typical event, the reservation and the completion over
// the in-memory store. `make bench` runs these with -benchmem.

var benchPayload = []byte(`{"id":"release-42","action":"notify","version":"1.4.2","repo":"acme/widgets","tag":"v1.4.2","sha":"0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6"}`)

func benchEngine(b *testing.B) *idem.Engine {
	e, err := idem.New(idem.Options{Store: memstore.New(), Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

var result = []byte(`{"status":200,"json":{"delivered":true,"downstream_status":202,"reply_bytes":0,"reply_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}`)

func action(context.Context) ([]byte, error) { return result, nil }

// BenchmarkEngineFresh is one new event: validate, fingerprint, reserve,
// run a no-op action, complete.
func BenchmarkEngineFresh(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "evt:release-" + strconv.Itoa(i) + ":notify"
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r, err := idem.NewRequest(keys[i], benchPayload)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Do(ctx, r, action); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEngineReplay is a duplicate of a completed event: validate,
// fingerprint, one reservation attempt that returns the stored result.
func BenchmarkEngineReplay(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	r, _ := idem.NewRequest("evt:release-42:notify", benchPayload)
	if _, err := e.Do(ctx, r, action); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r, err := idem.NewRequest("evt:release-42:notify", benchPayload)
		if err != nil {
			b.Fatal(err)
		}
		out, err := e.Do(ctx, r, action)
		if err != nil || !out.Replayed {
			b.Fatal(err)
		}
	}
}

package ddbstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

var updateWire = flag.Bool("update", false, "rewrite testdata/wire.golden.json from what the store sends now")

var uuidLike = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// wireRecorder keeps the body of every request the store sends, as the
// server receives it.
type wireRecorder struct {
	mu    sync.Mutex
	calls []wireCall
}

// wireCall is one request: the operation and its JSON body, and for a
// write, the stored items it touched, read back raw afterwards.
type wireCall struct {
	Op     string                     `json:"op"`
	Body   any                        `json:"body"`
	Stored map[string]json.RawMessage `json:"stored,omitempty"`
}

func (w *wireRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	// The SDK fills in a random ClientRequestToken (a UUID) where the
	// store sets none: that one is not ours to pin.
	if m, ok := v.(map[string]any); ok {
		if tok, ok := m["ClientRequestToken"].(string); ok && uuidLike.MatchString(tok) {
			m["ClientRequestToken"] = "(the SDK's random UUID)"
		}
	}
	w.mu.Lock()
	w.calls = append(w.calls, wireCall{Op: ddblocal.Operation(req), Body: v})
	w.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// TestWireFormatIsPinned pins, byte for byte (as parsed JSON), every
// request the store and the operators' Admin send, and every item their
// writes leave in the table, against testdata/wire.golden.json, written by
// the code before the codec moved (go test -run TestWireFormatIsPinned
// -update rewrites it). The stored format and the requests' expressions,
// names and values are the contract: a refactor of the encoder must leave
// this file unchanged.
func TestWireFormatIsPinned(t *testing.T) {
	_, ep := ddblocal.Minidyn(t)
	rec := &wireRecorder{}
	e := newEnv(t, ep, rec)
	other := ddblocal.NewTable(t, e.client)
	a := e.admin(t)
	rec.calls = nil
	ctx := context.Background()
	at := time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	keep := 48 * time.Hour
	stored := map[int][]string{} // call index -> pks to read back after it
	// step runs one write and names the items to read back after it.
	step := func(name string, fn func() error, pks ...string) {
		t.Helper()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rec.mu.Lock()
		stored[len(rec.calls)-1] = pks
		rec.mu.Unlock()
	}
	reserve := func(key, token string, now time.Time) idem.Reservation {
		return idem.Reservation{Key: key, Fingerprint: strings.Repeat("f", 64), Token: token, Now: now,
			LeaseUntil: now.Add(1500 * time.Millisecond), ExpiresAt: now.Add(keep).Add(300 * time.Millisecond)}
	}
	owned := func(r idem.Reservation) func() error {
		return func() error {
			if _, ok, err := a.Reserve(ctx, r); err != nil || !ok {
				t.Fatalf("Reserve(%s) = %v, %v", r.Key, ok, err)
			}
			return nil
		}
	}
	finish := func(r idem.Reservation, attempts int) idem.Finish {
		return idem.Finish{Key: r.Key, Token: r.Token, Now: r.Now.Add(time.Second), Attempts: attempts, ExpiresAt: r.ExpiresAt}
	}
	pk := func(key string) string { return "test-fn#" + key }

	// Reserve, a duplicate's refused Reserve, and Complete with each result encoding.
	r1 := reserve("evt:wire-1:x", "tok-1", at)
	step("Reserve", owned(r1), pk(r1.Key))
	step("Reserve duplicate", func() error {
		_, ok, err := a.Reserve(ctx, reserve(r1.Key, "tok-dup", at))
		if ok {
			t.Fatal("duplicate Reserve owned the key")
		}
		return err
	}, pk(r1.Key))
	f1 := finish(r1, 1)
	f1.Result = []byte(`{"status":202,"body":"ok"}`)
	step("Complete text", func() error { return a.Complete(ctx, f1) }, pk(r1.Key))
	r2 := reserve("evt:wire-2:x", "tok-2", at)
	step("Reserve", owned(r2), pk(r2.Key))
	f2 := finish(r2, 1)
	f2.Result = []byte{0xff, 0x00, 0xfe}
	step("Complete binary", func() error { return a.Complete(ctx, f2) }, pk(r2.Key))
	r3 := reserve("evt:wire-3:x", "tok-3", at)
	step("Reserve", owned(r3), pk(r3.Key))
	f3 := finish(r3, 1)
	f3.Result = bytes.Repeat([]byte(`{"line":"the same line again"}`), 2000)
	step("Complete gzip", func() error { return a.Complete(ctx, f3) }, pk(r3.Key))

	// Fail, a take-over of the failure, Fail again, Release, Forget.
	r4 := reserve("evt:wire-4:x", "tok-4", at)
	step("Reserve", owned(r4), pk(r4.Key))
	f4 := finish(r4, 1)
	f4.ErrorCode, f4.ErrorMessage, f4.Retryable = idem.CodeTransientFailure, "downstream answered 503", true
	step("Fail retryable", func() error { return a.Fail(ctx, f4) }, pk(r4.Key))
	failed, _, err := a.Get(ctx, r4.Key, f4.Now)
	if err != nil {
		t.Fatal(err)
	}
	r4b := reserve(r4.Key, "tok-4b", f4.Now.Add(time.Second))
	step("TakeOver failed", func() error {
		if _, ok, err := a.TakeOver(ctx, failed, r4b); err != nil || !ok {
			t.Fatalf("TakeOver = %v, %v", ok, err)
		}
		return nil
	}, pk(r4.Key))
	f4b := finish(r4b, 2)
	f4b.ErrorCode, f4b.ErrorMessage = "HTTP_422", "downstream answered 422"
	step("Fail permanent", func() error { return a.Fail(ctx, f4b) }, pk(r4.Key))
	failed, _, err = a.Get(ctx, r4.Key, f4b.Now)
	if err != nil {
		t.Fatal(err)
	}
	var released idem.Record
	step("Release failed", func() error {
		var ok bool
		released, ok, err = a.Release(ctx, failed, idem.Release{Token: "tok-rel", Now: f4b.Now.Add(time.Second), Audit: "alice: fixed the downstream"})
		if !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		return err
	}, pk(r4.Key))
	step("Forget released", func() error {
		_, ok, err := a.Forget(ctx, released, idem.Forget{Token: "tok-forget", Now: released.UpdatedAt.Add(time.Second), Audit: "bob: rerun"})
		if !ok {
			t.Fatalf("Forget = %v, %v", ok, err)
		}
		return err
	}, pk(r4.Key), "test-fn#forgotten#"+r4.Key)

	// A forced release of a live lease, a take-over with the audit carried
	// forward, and a forget of a success without a token or an audit.
	r5 := reserve("evt:wire-5:x", "tok-5", at)
	step("Reserve", owned(r5), pk(r5.Key))
	live, _, err := a.Get(ctx, r5.Key, at)
	if err != nil {
		t.Fatal(err)
	}
	step("Release forced", func() error {
		var ok bool
		released, ok, err = a.Release(ctx, live, idem.Release{Token: "tok-force", Now: at.Add(time.Millisecond), Force: true, Audit: "carol: stuck"})
		if !ok {
			t.Fatalf("Release forced = %v, %v", ok, err)
		}
		return err
	}, pk(r5.Key))
	step("TakeOver released", func() error {
		if _, ok, err := a.TakeOver(ctx, released, reserve(r5.Key, "tok-5b", at.Add(time.Second))); err != nil || !ok {
			t.Fatalf("TakeOver = %v, %v", ok, err)
		}
		return nil
	}, pk(r5.Key))
	step("Forget succeeded", func() error {
		_, ok, err := a.Forget(ctx, seed(t, a, "evt:wire-6:x", idem.StatusSucceeded, "", at), idem.Forget{Now: at.Add(time.Second), RerunSucceeded: true})
		if !ok {
			t.Fatalf("Forget = %v, %v", ok, err)
		}
		return err
	}, pk("evt:wire-6:x"), "test-fn#forgotten#evt:wire-6:x")

	// Poison notes, with and without a key, and a completion with effects.
	step("RecordPoison keyed", func() error {
		return a.RecordPoison(ctx, idem.Poison{ID: "m-1", Key: "evt:wire-7:x", Reason: idem.CodeNotJSON, Detail: "body is not JSON",
			BodySHA256: strings.Repeat("a", 64), BodySize: 12, At: at, ExpiresAt: at.Add(keep)})
	}, "test-fn#poison#m-1")
	step("RecordPoison unkeyed", func() error {
		return a.RecordPoison(ctx, idem.Poison{ID: "m-2", Reason: idem.CodeNotJSON, At: at, ExpiresAt: at.Add(keep)})
	}, "test-fn#poison#m-2")
	r8 := reserve("evt:wire-8:x", "tok-8", at)
	step("Reserve", owned(r8), pk(r8.Key))
	f8 := finish(r8, 1)
	f8.Result = []byte(`{"status":201}`)
	step("CompleteWithEffects", func() error {
		return a.CompleteWithEffects(ctx, f8, ddbstore.Effects{{Put: &types.Put{TableName: &other,
			Item:                map[string]types.AttributeValue{ddbstore.AttrPK: &types.AttributeValueMemberS{Value: "ledger-1"}},
			ConditionExpression: aws.String("attribute_not_exists(pk)")}}})
	}, pk(r8.Key))

	// A failure held off after a sent request (hold_until), and an
	// operator's release, which clears the hold-off.
	r9 := reserve("evt:wire-9:x", "tok-9", at)
	step("Reserve", owned(r9), pk(r9.Key))
	f9 := finish(r9, 1)
	f9.ErrorCode, f9.ErrorMessage, f9.Retryable = idem.CodeTransientFailure, "the request timed out once written", true
	f9.HoldUntil = f9.Now.Add(5 * time.Second)
	step("Fail held off", func() error { return a.Fail(ctx, f9) }, pk(r9.Key))
	held, _, err := a.Get(ctx, r9.Key, f9.Now)
	if err != nil {
		t.Fatal(err)
	}
	step("Release held off", func() error {
		_, ok, err := a.Release(ctx, held, idem.Release{Token: "tok-rel-9", Now: f9.Now.Add(time.Second), Audit: "dave: the receiver is done"})
		if !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		return err
	}, pk(r9.Key))

	// The reads: every listing shape, and the notes.
	reads := func() error {
		for _, q := range []ddbstore.Query{
			{Now: at, Status: idem.StatusFailed, Limit: 1},
			{Now: at, Poison: true, Code: idem.CodeNotJSON, Since: at.Add(-time.Hour), Until: at.Add(time.Hour)},
			{Now: at, Scan: true, Limit: 2},
			{Now: at, WithPoison: true, Code: "HTTP_422"},
		} {
			if _, err := a.List(ctx, q); err != nil {
				return err
			}
		}
		if _, _, err := a.HasIndexEntries(ctx); err != nil {
			return err
		}
		if _, _, err := a.Inspect(ctx, r1.Key); err != nil {
			return err
		}
		if _, _, err := a.GetPoison(ctx, "m-1", at); err != nil {
			return err
		}
		_, _, err := a.GetForgotten(ctx, r4.Key, at)
		return err
	}
	step("reads", reads)

	calls := rec.calls
	for i, pks := range stored {
		for _, p := range pks {
			item := rawItem(t, e, p)
			raw, err := json.Marshal(wireItem(item))
			if err != nil {
				t.Fatal(err)
			}
			if calls[i].Stored == nil {
				calls[i].Stored = map[string]json.RawMessage{}
			}
			calls[i].Stored[p] = raw
		}
	}
	got, err := json.MarshalIndent(calls, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	got = bytes.ReplaceAll(got, []byte(e.table), []byte("TABLE"))
	got = bytes.ReplaceAll(got, []byte(other), []byte("OTHER"))
	// Re-indent through a generic value so that stored items are indented too.
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	got, _ = json.MarshalIndent(v, "", " ")
	got = append(got, '\n')
	const golden = "testdata/wire.golden.json"
	if *updateWire {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("requests or stored items differ from %s (-want +got):\n%s", golden, diff)
	}
}

// wireItem is an item as DynamoDB's JSON writes it ({"S": ...}, {"N": ...}).
func wireItem(item map[string]types.AttributeValue) map[string]map[string]any {
	out := map[string]map[string]any{}
	for name, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			out[name] = map[string]any{"S": v.Value}
		case *types.AttributeValueMemberN:
			out[name] = map[string]any{"N": v.Value}
		case *types.AttributeValueMemberB:
			out[name] = map[string]any{"B": v.Value}
		case *types.AttributeValueMemberBOOL:
			out[name] = map[string]any{"BOOL": v.Value}
		default:
			out[name] = map[string]any{"?": fmt.Sprintf("%T", v)}
		}
	}
	return out
}

package fakewebhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/testing/fakewebhook"
)

func serve(t *testing.T, s *fakewebhook.Server) string {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); hs.Close() })
	return hs.URL
}

// post sends one delivery, as notify does, and says what the sender saw.
func post(t *testing.T, url, key string, timeout time.Duration) (status int, retryAfter string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

func TestEachModeDoesWhatItSaysAndIsAudited(t *testing.T) {
	for _, c := range []struct {
		mode                fakewebhook.Mode
		chaos               fakewebhook.Chaos
		outage              bool
		status              int
		retryAfter          string
		senderErr           bool
		accepted, replyLost bool
	}{
		{mode: fakewebhook.ModeAccept, status: 202, accepted: true},
		{mode: fakewebhook.ModeUnavailable, chaos: fakewebhook.Chaos{Unavailable: 1}, status: 503},
		{mode: fakewebhook.ModeThrottled, chaos: fakewebhook.Chaos{Throttled: 1, RetryAfter: "2"}, status: 429, retryAfter: "2"},
		{mode: fakewebhook.ModeHang, chaos: fakewebhook.Chaos{Hang: 1}, senderErr: true, accepted: true, replyLost: true},
		{mode: fakewebhook.ModeResetBefore, chaos: fakewebhook.Chaos{ResetBefore: 1}, senderErr: true},
		{mode: fakewebhook.ModeResetAfter, chaos: fakewebhook.Chaos{ResetAfter: 1}, senderErr: true, accepted: true, replyLost: true},
		{mode: fakewebhook.ModeOutage, chaos: fakewebhook.Chaos{ResetAfter: 1}, outage: true, status: 503},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			s := fakewebhook.New()
			s.SetChaos(&c.chaos)
			s.SetOutage(c.outage)
			var hooked atomic.Int32
			s.OnAccept(func(fakewebhook.Delivery) { hooked.Add(1) })
			url := serve(t, s)
			status, ra, err := post(t, url, "k1", 300*time.Millisecond)
			if (err != nil) != c.senderErr || status != c.status || ra != c.retryAfter {
				t.Errorf("sender saw %d Retry-After %q error %v; want %d %q error: %t", status, ra, err, c.status, c.retryAfter, c.senderErr)
			}
			// The audit entry is final once the handler returns.
			var audit []fakewebhook.Delivery
			for range 100 {
				if audit = s.Audit(); len(audit) == 1 && !audit[0].Done.IsZero() {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(audit) != 1 {
				t.Fatalf("audit %+v; want one delivery", audit)
			}
			d := audit[0]
			if d.Key != "k1" || d.Mode != c.mode || d.Accepted != c.accepted || d.ReplyLost != c.replyLost {
				t.Errorf("audit %+v; want k1 %s accepted %t reply lost %t", d, c.mode, c.accepted, c.replyLost)
			}
			if want := map[bool]int{true: 1}[c.accepted]; int(hooked.Load()) != want || len(s.Accepted()) != want {
				t.Errorf("OnAccept ran %d times, Accepted has %d; want %d", hooked.Load(), len(s.Accepted()), want)
			}
		})
	}
}

func TestChaosIsSeeded(t *testing.T) {
	modes := func(seed uint64) []fakewebhook.Mode {
		s := fakewebhook.New()
		s.SetChaos(&fakewebhook.Chaos{Seed: seed, Unavailable: 0.3, Throttled: 0.3})
		url := serve(t, s)
		for i := range 40 {
			if _, _, err := post(t, url, fmt.Sprint("k", i), 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		var out []fakewebhook.Mode
		for _, d := range s.Audit() {
			out = append(out, d.Mode)
		}
		return out
	}
	a, b, other := modes(7), modes(7), modes(8)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("the same seed gave other modes (-first +second):\n%s", diff)
	}
	if slices.Equal(a, other) {
		t.Errorf("seeds 7 and 8 gave the same 40 modes %v", a)
	}
	for _, m := range []fakewebhook.Mode{fakewebhook.ModeAccept, fakewebhook.ModeUnavailable, fakewebhook.ModeThrottled} {
		if !slices.Contains(a, m) {
			t.Errorf("40 deliveries at 30%%/30%%/40%% never gave %s: %v", m, a)
		}
	}
}

func TestScriptedRepliesComeFirst(t *testing.T) {
	s := fakewebhook.New()
	s.SetChaos(&fakewebhook.Chaos{Unavailable: 1})
	s.Script("k", fakewebhook.Reply{Status: 404}, fakewebhook.Reply{Status: 200})
	url := serve(t, s)
	var got []int
	for range 3 {
		st, _, err := post(t, url, "k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st)
	}
	if diff := cmp.Diff([]int{404, 200, 503}, got); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if n := len(s.Accepted()); n != 1 || s.Count("k") != 3 {
		t.Errorf("accepted %d of %d; want 1 of 3", n, s.Count("k"))
	}
}

package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/rie"
)

// welcome is the example function running under the emulator.
type welcome struct {
	emu   *rie.Emulator
	mails atomic.Int64
	mu    sync.Mutex
	reply func(n int64) (int, string) // the mail API's answer to its n-th call
}

func startWelcome(t *testing.T) *welcome {
	t.Helper()
	w := &welcome{reply: func(int64) (int, string) { return 200, `{"messageId":"m-1"}` }}
	mail := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := w.mails.Add(1)
		w.mu.Lock()
		status, body := w.reply(n)
		w.mu.Unlock()
		rw.WriteHeader(status)
		fmt.Fprint(rw, body)
	}))
	t.Cleanup(mail.Close)
	_, ddb := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ddb, nil))
	table := ddblocal.NewTable(t, client)
	w.emu = startExample(t, "welcome", ddb, "AWS_LAMBDA_FUNCTION_TIMEOUT=10", "TABLE_NAME="+table, "MAIL_API_URL="+mail.URL)
	return w
}

func (w *welcome) answer(f func(n int64) (int, string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reply = f
}

// invoke sends a user.signed_up event for user (a fresh envelope id each
// time, as EventBridge gives a retry) and returns the function's answer.
func (w *welcome) invoke(t *testing.T, user string) string {
	t.Helper()
	detail, _ := json.Marshal(map[string]string{"userId": user, "email": user + "@example.com"})
	ev := events.EventBridgeEvent{Version: "0", ID: fmt.Sprintf("env-%d", w.mails.Load()) + "-" + user, DetailType: "user.signed_up",
		Source: "com.example.accounts", Region: "us-east-1", Detail: detail}
	payload, _ := json.Marshal(ev)
	out, err := w.emu.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	return string(out)
}

func TestWelcomeUnderTheEmulator(t *testing.T) {
	w := startWelcome(t)

	// The same signup twice (a retried invoke, a second EventBridge
	// delivery): one mail, and the second invoke gets the stored receipt.
	first, again := w.invoke(t, "u-1001"), w.invoke(t, "u-1001")
	if first != `{"messageId":"m-1"}` || again != first || w.mails.Load() != 1 {
		t.Fatalf("twice: %s then %s, %d mails; want the receipt twice and one mail", first, again, w.mails.Load())
	}

	// A marked transient failure (the mail API's 503 on each of the call's
	// three attempts) fails the invoke and leaves the key free: the next
	// invoke (Lambda's retry) mails and succeeds.
	w.answer(func(n int64) (int, string) {
		if n <= 4 {
			return 503, `{"error":"busy"}`
		}
		return 200, fmt.Sprintf(`{"messageId":"m-%d"}`, n)
	})
	if out := w.invoke(t, "u-1002"); !strings.Contains(out, "TRANSIENT_FAILURE") || w.mails.Load() != 4 {
		t.Fatalf("503s: %s after %d mails; want the invoke to fail with TRANSIENT_FAILURE after 3 attempts", out, w.mails.Load())
	}
	if out := w.invoke(t, "u-1002"); out != `{"messageId":"m-5"}` || w.mails.Load() != 5 {
		t.Fatalf("the retry after the 503s: %s, %d mails; want it to mail again and succeed", out, w.mails.Load())
	}

	// A permanent failure (the mail API refuses the address) is stored and
	// replayed: the retry does not mail again.
	w.answer(func(int64) (int, string) { return 422, `{"error":"bad address"}` })
	first = w.invoke(t, "u-1003")
	again = w.invoke(t, "u-1003")
	if !strings.Contains(first, "MAIL_REFUSED") || !strings.Contains(again, "MAIL_REFUSED") || w.mails.Load() != 6 {
		t.Fatalf("a refusal: %s then %s, %d mails; want MAIL_REFUSED twice from one mail", first, again, w.mails.Load())
	}
}

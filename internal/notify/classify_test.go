package notify_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
)

func TestClassifier(t *testing.T) {
	def := notify.Classifier{}
	for status, want := range map[int]idem.Class{
		429: idem.ClassTransient, 502: idem.ClassTransient, 503: idem.ClassTransient, 504: idem.ClassTransient,
		400: idem.ClassPermanent, 401: idem.ClassPermanent, 403: idem.ClassPermanent, 404: idem.ClassPermanent,
		409: idem.ClassPermanent, 422: idem.ClassPermanent, 418: idem.ClassPermanent,
		500: idem.ClassPermanent, 501: idem.ClassPermanent, 599: idem.ClassPermanent,
		301: idem.ClassPermanent, 302: idem.ClassPermanent, 307: idem.ClassPermanent, 204: idem.ClassUnknown,
	} {
		if got := def.Class(status); got != want {
			t.Errorf("default Class(%d) = %v; want %v", status, got, want)
		}
	}
	custom := notify.Classifier{Transient: map[int]bool{500: true}}
	if custom.Class(500) != idem.ClassTransient || custom.Class(503) != idem.ClassPermanent {
		t.Errorf("custom transient set not honoured: 500=%v 503=%v", custom.Class(500), custom.Class(503))
	}
	now := time.Now()
	err := def.Error(429, "7", now)
	var ce *idem.ClassifiedError
	if !errors.As(err, &ce) || ce.RetryAfter != 7*time.Second || ce.Code != "HTTP_429" || ce.Error() != "HTTP 429" {
		t.Fatalf("Error(429, 7) = %#v; want transient HTTP_429 with RetryAfter 7s", err)
	}
	var se *notify.StatusError
	if !errors.As(err, &se) || se.Status != 429 {
		t.Errorf("status not reachable through errors.As: %v", err)
	}
	if got := notify.DefaultTransientStatuses(); fmt.Sprint(got) != "[429 502 503 504]" {
		t.Errorf("DefaultTransientStatuses() = %v", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{"soon", 0},
		{"999999999", 24 * time.Hour},
		{"Mon, 30 Nov 2026 12:00:30 GMT", 30 * time.Second},
		{"Mon, 30 Nov 2026 11:00:00 GMT", 0},
	}
	for _, tt := range tests {
		if got := notify.ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

// TestStatusCodes: the code stored for a status has the form operators'
// filters recognise, and nothing else has it.
func TestStatusCodes(t *testing.T) {
	for _, status := range []int{100, 404, 422, 503, 599} {
		if c := notify.StatusCode(status); !notify.IsStatusCode(c) {
			t.Errorf("IsStatusCode(%s) = false, want true", c)
		}
	}
	for _, c := range []idem.Code{"HTTP_42", "HTTP_4220", "HTTP_099", "HTTP_600", "HTTP_+42", "http_422", "HTTP_", "HTTP_4x2", "PERMANENT_FAILURE"} {
		if notify.IsStatusCode(c) {
			t.Errorf("IsStatusCode(%q) = true, want false", c)
		}
	}
}

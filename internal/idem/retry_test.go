package idem_test

import (
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

func TestRetryPolicyDelay(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		p          idem.RetryPolicy
		attempt    int
		retryAfter time.Duration
		random     float64
		want       time.Duration
		wantOK     bool
	}{
		{"seed first", seedPolicy, 1, 0, 0, 10 * ms, true},
		{"seed second", seedPolicy, 2, 0, 0, 20 * ms, true},
		{"exponential", seedPolicy, 5, 0, 0.9, 160 * ms, true},
		{"capped at max", idem.RetryPolicy{Base: 100 * ms, Max: 300 * ms}, 10, 0, 0, 300 * ms, true},
		{"huge attempt does not overflow", idem.RetryPolicy{Base: 100 * ms, Max: time.Second}, 1000, 0, 0, time.Second, true},
		{"attempt below 1 is 1", seedPolicy, 0, 0, 0, 10 * ms, true},
		{"jitter adds a fraction", idem.RetryPolicy{Base: 100 * ms, Max: time.Second, Jitter: 0.5}, 1, 0, 0.5, 125 * ms, true},
		{"jitter after cap", idem.RetryPolicy{Base: 100 * ms, Max: 100 * ms, Jitter: 1}, 3, 0, 0.5, 150 * ms, true},
		{"retry-after raises the delay", seedPolicy, 1, 500 * ms, 0, 500 * ms, true},
		{"retry-after below backoff", seedPolicy, 3, 5 * ms, 0, 40 * ms, true},
		{"retry-after beyond cap stops", seedPolicy, 1, 2 * time.Second, 0, 2 * time.Second, false},
		{"retry-after at cap is honoured", seedPolicy, 1, time.Second, 0, time.Second, true},
		{"zero value defaults", idem.RetryPolicy{}, 2, 0, 0, 200 * ms, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.p.Delay(tt.attempt, tt.retryAfter, tt.random)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Delay(%d, %v, %v) = %v, %v; want %v, %v", tt.attempt, tt.retryAfter, tt.random, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

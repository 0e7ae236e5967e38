package sqsvisibility_test

import (
	"testing"
	"time"

	"github.com/oncely/oncely/internal/sqsvisibility"
)

func TestDelay(t *testing.T) {
	s := time.Second
	p := sqsvisibility.Policy{Base: 30 * s, Max: 15 * time.Minute}
	tests := []struct {
		name        string
		reason      sqsvisibility.Reason
		receive     int
		d, since    time.Duration
		random      float64
		want        time.Duration
		policy      *sqsvisibility.Policy
		description string
	}{
		{name: "first receive, floor", reason: sqsvisibility.Backoff, receive: 1, random: 0, want: 15 * s},
		{name: "first receive, top", reason: sqsvisibility.Backoff, receive: 1, random: 0.999, want: 30 * s},
		{name: "doubles per receive", reason: sqsvisibility.Backoff, receive: 4, random: 0.999, want: 240 * s},
		{name: "capped", reason: sqsvisibility.Backoff, receive: 20, random: 0.999, want: 15 * time.Minute},
		{name: "floor keeps half the cap", reason: sqsvisibility.Backoff, receive: 20, random: 0, want: 450 * s},
		{name: "a missing count is the first receive", reason: sqsvisibility.Backoff, receive: 0, random: 0, want: 15 * s},
		{name: "never below a second", reason: sqsvisibility.Backoff, receive: 1, random: 0, want: s,
			policy: &sqsvisibility.Policy{Base: 100 * time.Millisecond, Max: time.Second}},
		{name: "whole seconds, rounded up", reason: sqsvisibility.Backoff, receive: 1, random: 0.5, want: 3 * s,
			policy: &sqsvisibility.Policy{Base: 3 * s, Max: 3 * s}},
		{name: "retry-after exactly", reason: sqsvisibility.RetryAfter, receive: 7, d: 120 * s, want: 120 * s},
		{name: "retry-after rounded up", reason: sqsvisibility.RetryAfter, d: 1500 * time.Millisecond, want: 2 * s},
		{name: "retry-after within 12 h of the receive", reason: sqsvisibility.RetryAfter, d: 24 * time.Hour, since: time.Minute,
			want: 12*time.Hour - 5*time.Minute - time.Minute},
		{name: "in progress: lease left plus margin", reason: sqsvisibility.InProgress, d: 7300 * time.Millisecond, want: 10 * s},
		{name: "sent: the backoff when it is longer than the pause", reason: sqsvisibility.Sent, receive: 1, d: 5 * s, random: 0, want: 15 * s},
		{name: "sent: never shorter than the pause", reason: sqsvisibility.Sent, receive: 1, d: 40 * s, random: 0.999, want: 40 * s},
		{name: "sent: the pause within 12 h of the receive", reason: sqsvisibility.Sent, receive: 1, d: 24 * time.Hour,
			want: 12*time.Hour - 5*time.Minute},
		{name: "zero value policy uses the defaults", reason: sqsvisibility.Backoff, receive: 2, random: 0.999, want: 60 * s,
			policy: &sqsvisibility.Policy{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := p
			if tt.policy != nil {
				pol = *tt.policy
			}
			if got := pol.Delay(tt.reason, tt.receive, tt.d, tt.since, tt.random); got != tt.want {
				t.Errorf("Delay = %v; want %v", got, tt.want)
			}
		})
	}
}

// Range documents the template's configuration: 30 s base, 15 min cap, the
// DLQ after 8 receives (docs/how-it-works.md, "Retries across deliveries").
func TestRange(t *testing.T) {
	shortest, longest := sqsvisibility.Policy{Base: 30 * time.Second, Max: 15 * time.Minute}.Range(8)
	if shortest != 1815*time.Second || longest != 3630*time.Second {
		t.Errorf("Range(8) = %v, %v; want 30m15s, 1h0m30s", shortest, longest)
	}
}

func TestQueueURL(t *testing.T) {
	tests := []struct{ arn, want string }{
		{"arn:aws:sqs:us-east-1:123456789012:oncely-events", "https://sqs.us-east-1.amazonaws.com/123456789012/oncely-events"},
		{"arn:aws:sqs:eu-west-1:123456789012:orders.fifo", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"},
		{"arn:aws-cn:sqs:cn-north-1:123456789012:q", "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q"},
		{"arn:aws:sns:us-east-1:123456789012:topic", ""},
		{"not an arn", ""},
		{"arn:aws:sqs:us-east-1::q", ""},
	}
	for _, tt := range tests {
		got, err := sqsvisibility.QueueURL(tt.arn)
		if got != tt.want || (err != nil) != (tt.want == "") {
			t.Errorf("QueueURL(%q) = %q, %v; want %q", tt.arn, got, err, tt.want)
		}
	}
}

package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/oncely/oncely/internal/idem"
)

func TestClassify(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		err  error
		want idem.Class
	}{
		{"nil", nil, idem.ClassUnknown},
		{"plain", errors.New("x"), idem.ClassUnknown},
		{"marked transient", idem.Transient(errors.New("x")), idem.ClassTransient},
		{"marked permanent, wrapped", fmt.Errorf("ctx: %w", idem.Permanent(errors.New("x"))), idem.ClassPermanent},
		{"outcome unknown", idem.OutcomeUnknown(errors.New("x")), idem.ClassOutcomeUnknown},
		{"sent", idem.TransientSent(errors.New("x")), idem.ClassTransient},
		{"deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), idem.ClassTransient},
		{"canceled", context.Canceled, idem.ClassTransient},
		{"net timeout", timeout, idem.ClassTransient},
		{"conn reset", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, idem.ClassTransient},
		{"conn refused", syscall.ECONNREFUSED, idem.ClassTransient},
		{"unexpected eof", io.ErrUnexpectedEOF, idem.ClassTransient},
		{"dns failure", &net.DNSError{Err: "no such host", Name: "hooks.example", IsNotFound: true}, idem.ClassTransient},
		{"dial failure", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route")}, idem.ClassTransient},
		{"network unreachable", syscall.ENETUNREACH, idem.ClassTransient},
		// The class comes from the type, never from the message text.
		{"message mentions timeout", errors.New("timeout 503 throttled"), idem.ClassUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := idem.Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v; want %v", tt.err, got, tt.want)
			}
		})
	}
}

// Sent is read through wrapping, and only TransientSent sets it.
func TestTransientSentIsTransientAndMarked(t *testing.T) {
	var ce *idem.ClassifiedError
	if err := fmt.Errorf("notify: %w", idem.TransientSent(io.EOF)); !errors.As(err, &ce) || !ce.Sent || ce.Class != idem.ClassTransient || !errors.Is(err, io.EOF) {
		t.Errorf("TransientSent wrapped: %+v; want transient, Sent, unwrapping to its cause", ce)
	}
	for _, err := range []error{idem.Transient(io.EOF), idem.TransientAfter(io.EOF, 1), idem.OutcomeUnknown(io.EOF)} {
		if errors.As(err, &ce) && ce.Sent {
			t.Errorf("%#v: Sent; want it set by TransientSent only", err)
		}
	}
}

func TestErrorMatchesSentinelsByCode(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &idem.Error{Code: idem.CodeLeaseLost, Message: "taken over", Err: io.EOF})
	if !errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrInProgress) {
		t.Errorf("errors.Is by code failed for %v", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("cause not reachable through Unwrap")
	}
	if got := (&idem.Error{Code: idem.CodeInProgress}).Error(); got != "IN_PROGRESS" {
		t.Errorf("Error() = %q", got)
	}
	if got := err.Error(); got != "wrapped: LEASE_LOST: taken over" {
		t.Errorf("Error() = %q", got)
	}
	for c, want := range map[idem.Class]string{idem.ClassUnknown: "unknown", idem.ClassTransient: "transient", idem.ClassPermanent: "permanent", idem.ClassOutcomeUnknown: "outcome_unknown"} {
		if c.String() != want {
			t.Errorf("Class(%d).String() = %q; want %q", c, c.String(), want)
		}
	}
	if got := (&idem.ClassifiedError{Class: idem.ClassTransient}).Error(); got != "transient error" {
		t.Errorf("empty ClassifiedError.Error() = %q", got)
	}
}

func TestFingerprint(t *testing.T) {
	a, err := idem.Fingerprint([]byte(`{"id":"release-42","n":[1,2],"x":{"b":1,"a":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := idem.Fingerprint([]byte("{\"x\":{\"a\":2,\"b\":1},\n \"n\":[1, 2], \"id\":\"release-42\"}"))
	if a != b || len(a) != 64 {
		t.Errorf("key order or whitespace changed the fingerprint: %s vs %s", a, b)
	}
	c, _ := idem.Fingerprint([]byte(`{"id":1234567890123456789}`))
	d, _ := idem.Fingerprint([]byte(`{"id":1234567890123456788}`))
	if c == d {
		t.Errorf("19-digit ids differing in the last digit share a fingerprint")
	}
	if _, err := idem.Fingerprint([]byte(`{"id":`)); errCode(err) != idem.CodeInvalidPayload {
		t.Errorf("invalid JSON: %v; want INVALID_PAYLOAD", err)
	}
	if _, err := idem.NewRequest("evt:ok-key:notify", []byte(`nope`)); errCode(err) != idem.CodeInvalidPayload {
		t.Errorf("NewRequest with invalid JSON: %v; want INVALID_PAYLOAD", err)
	}
}

// NextDelivery is read through wrapping, only TransientNextDelivery sets
// it, and a Sent mark anywhere in the chain wins: a request that may still
// be in flight keeps its pause.
func TestNextDeliveryIsReadThroughWrappingAndSentWins(t *testing.T) {
	if err := fmt.Errorf("notify: %w", idem.TransientNextDelivery(io.EOF)); !idem.IsNextDelivery(err) || idem.IsSent(err) || idem.Classify(err) != idem.ClassTransient || !errors.Is(err, io.EOF) {
		t.Errorf("TransientNextDelivery wrapped: IsNextDelivery %v, IsSent %v, class %v; want true, false, transient", idem.IsNextDelivery(err), idem.IsSent(err), idem.Classify(err))
	}
	if err := idem.Transient(idem.TransientNextDelivery(io.EOF)); !idem.IsNextDelivery(err) {
		t.Errorf("%v: IsNextDelivery false under an outer mark; want true", err)
	}
	for _, err := range []error{idem.TransientNextDelivery(idem.TransientSent(io.EOF)), idem.TransientSent(fmt.Errorf("x: %w", idem.TransientNextDelivery(io.EOF)))} {
		if idem.IsNextDelivery(err) || !idem.IsSent(err) {
			t.Errorf("%v: IsNextDelivery %v, IsSent %v; want Sent to win", err, idem.IsNextDelivery(err), idem.IsSent(err))
		}
	}
	for _, err := range []error{idem.Transient(io.EOF), idem.TransientSent(io.EOF), idem.Permanent(io.EOF), io.EOF, nil} {
		if idem.IsNextDelivery(err) {
			t.Errorf("%#v: IsNextDelivery; want it set by TransientNextDelivery only", err)
		}
	}
}

// Package faults injects the failures a network service shows in real
// life, between a client and a real server: a slow-down answer, a server
// error, a connection refused before anything was sent, a reply lost after
// the server acted. It is test support: the conformance suite uses its
// Transport to check every driver's error classification, and the soak puts
// its Proxy in front of the real servers.
//
// The package knows HTTP, not any one service: what a "throttle" looks like
// on the wire comes from a Replies function the service's test support
// provides (see ddblocal.Replies).
package faults

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
)

// Kind is one kind of fault.
type Kind string

// The kinds. Each says what the server did and what the client can know.
const (
	// None passes the request through.
	None Kind = ""
	// Throttle: the server refused the request for load (DynamoDB's
	// ThrottlingException). Nothing happened; retryable.
	Throttle Kind = "throttle"
	// ServerError: the server failed (HTTP 500). Nothing is known to have
	// happened; the service documents it as retryable.
	ServerError Kind = "server_error"
	// Unavailable: HTTP 503 from a front end. Retryable.
	Unavailable Kind = "unavailable"
	// Refuse: the connection failed before the request left (a dial
	// error). Nothing happened; always safe to retry.
	Refuse Kind = "refuse"
	// DropReply: the request reached the server, which acted; the reply was
	// lost (a reset while reading). A write's outcome is unknown.
	DropReply Kind = "drop_reply"
	// Reset: the connection was reset while the request was being sent; the
	// server never got it, but the client cannot tell that from DropReply.
	Reset Kind = "reset"
	// MissingTable: the resource does not exist. Permanent.
	MissingTable Kind = "missing_table"
	// AccessDenied: the caller lacks a permission. Permanent.
	AccessDenied Kind = "access_denied"
)

// Replies builds the service's own answer for a kind that is an answer
// (Throttle, ServerError, Unavailable, MissingTable, AccessDenied).
type Replies func(k Kind, req *http.Request) *http.Response

// Transport is an http.RoundTripper that forwards to Base (nil means
// http.DefaultTransport) and injects the fault Decide chooses per request.
// It is safe for concurrent use if Decide is.
type Transport struct {
	Base    http.RoundTripper
	Decide  func(req *http.Request) Kind
	Replies Replies
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	kind := None
	if t.Decide != nil {
		kind = t.Decide(req)
	}
	switch kind {
	case None:
		return base.RoundTrip(req)
	case Refuse:
		drain(req)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case Reset:
		drain(req)
		return nil, &os.SyscallError{Syscall: "write", Err: syscall.ECONNRESET}
	case DropReply:
		resp, err := base.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}
	default:
		drain(req)
		if t.Replies == nil {
			return nil, errors.New("faults: no Replies for " + string(kind))
		}
		return t.Replies(kind, req), nil
	}
}

func drain(req *http.Request) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
}

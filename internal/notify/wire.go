package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// What became of a POST on the wire: whether any of it left the process,
// so that the receiver may have it ("sent"), decided for each protocol.
//
//   - HTTP/1.1: a connection carries one request at a time, so the bytes
//     written to it while the request holds it are the request's. None
//     written, nothing left: the request is not sent, and net/http sends it
//     again at once on a fresh connection (it asks GetBody for the body).
//   - HTTP/2: streams share the connection, and its byte count cannot say
//     which stream wrote. The protocol decides instead: a stream the server
//     refused (REFUSED_STREAM) or one above the last stream id of its
//     GOAWAY was not processed, and net/http sends it again itself; any
//     other end after the request got its connection counts as sent
//     (but see leftLocked on PROTOCOL_ERROR).

// countedConn is a connection that counts the bytes written to it.
type countedConn struct {
	net.Conn
	written atomic.Uint64
}

// Write counts what the kernel took. Only net.Conn's methods are promoted:
// an io.ReaderFrom of the connection underneath would write around it.
func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(uint64(n))
	return n, err
}

// countWrites wraps a transport's dial: every connection it makes counts
// its writes (under TLS too: the transport's TLS runs on top of it).
func countWrites(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c}, nil
	}
}

// sendTrace follows one POST through net/http, retries on a fresh
// connection included, with one httptrace hook set: the connection it was
// given last and what was written on it, for the verdict on whether the
// receiver may have it, and the Signer's read count when it was written.
type sendTrace struct {
	signer Signer        // nil: no mark is taken
	mark   atomic.Uint64 // signer.Reads()+1 when last written; 0 until then

	mu     sync.Mutex
	got    bool         // a connection was given to the request
	conn   *countedConn // its counter; nil when the client's dialer does not count
	h2     bool         // it speaks HTTP/2
	from   uint64       // its bytes written when given (HTTP/1.1)
	wrote  bool         // net/http reported the request written (or failed) on it
	resent bool         // net/http asked to send it again, and none of it had left
}

func (s *sendTrace) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: s.gotConn, WroteRequest: s.wroteRequest}
}

// gotConn starts the watch of a connection: the first, or a fresh one
// after a request that did not leave.
func (s *sendTrace) gotConn(info httptrace.GotConnInfo) {
	c, h2 := info.Conn, false
	if tc, ok := c.(*tls.Conn); ok {
		h2 = tc.ConnectionState().NegotiatedProtocol == "h2"
		c = tc.NetConn()
	}
	cc, _ := c.(*countedConn)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got, s.conn, s.h2, s.from, s.wrote, s.resent = true, cc, h2, 0, false, false
	if cc != nil {
		s.from = cc.written.Load()
	}
}

// wroteRequest runs when net/http has written the request, or failed to:
// on HTTP/1.1 before it flushes its buffer, so it says the write was tried,
// not that a byte left. The mark is the latest write's: a refusal is judged
// by a read begun after the request it refused was sent.
func (s *sendTrace) wroteRequest(httptrace.WroteRequestInfo) {
	if s.signer != nil {
		for v := s.signer.Reads() + 1; ; {
			old := s.mark.Load()
			if v <= old || s.mark.CompareAndSwap(old, v) {
				break
			}
		}
	}
	s.mu.Lock()
	s.wrote = true
	s.mu.Unlock()
}

// readsWhenSent returns the Signer's read count when the request was sent.
// If the hook has not run yet (a reply before the body was all written),
// the count now: later than the send, so only a read begun after it counts
// (stricter).
func (s *sendTrace) readsWhenSent() uint64 {
	s.mark.CompareAndSwap(0, s.signer.Reads()+1)
	return s.mark.Load() - 1
}

// leftLocked reports whether any of the request may have reached the
// receiver on the connection it holds.
//
// On HTTP/1.1, net/http reports an error, or asks for the body again, only
// once its writer is done with the request (it waits for it), so a write
// not tried then never will be; and the bytes written while the request
// held the connection are its own once a write was tried. (A TLS
// close_notify, written when the transport closes a connection the server
// closed first, is counted only if it comes while the write is tried: it
// then errs on the side of sent.) On a connection that does not count, a
// write tried is taken as sent.
//
// On HTTP/2, net/http asks for the body again only after the server said
// it did not process the stream: REFUSED_STREAM, or a GOAWAY whose last
// stream id is below it (or on a connection it found unusable before the
// stream began). It also asks after a reset with PROTOCOL_ERROR from the
// server, a choice of its own (golang/go#47635: servers that send it for a
// stream they refused), which cannot be told apart here: it is taken as
// net/http takes it. Any other end is not asked about, and counts as sent
// (see verdict).
func (s *sendTrace) leftLocked() bool {
	switch {
	case !s.got || s.resent:
		return false
	case s.h2:
		return false
	case s.conn == nil:
		return s.wrote
	default:
		return s.wrote && s.conn.written.Load() > s.from
	}
}

// rewind is the request's GetBody: net/http asks for the body again to send
// the request once more on another connection. It does so on its own after
// a reused connection failed, and for a request that carries an
// Idempotency-Key even after it was written: a second POST within one
// attempt, which is refused unless none of the request left.
func (s *sendTrace) rewind(body []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.leftLocked() {
			return nil, errReplayRefused
		}
		s.resent = true
		return io.NopCloser(bytes.NewReader(body)), nil
	}
}

// verdict reports, once the client gave up on the request, whether the
// receiver may have it, and how to say it. On HTTP/2 (or a connection that
// does not count), any end after the request got its connection counts as
// sent, unless net/http was let send it again (see rewind); one whose
// write has not reported yet (a stream cut by the timeout) may have been.
func (s *sendTrace) verdict() (sent bool, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.got || s.resent:
		return false, "was not sent"
	case (s.h2 || s.conn == nil) && !s.wrote:
		return true, "may have been sent (the receiver may have it)"
	case s.h2 || s.conn == nil || s.leftLocked():
		return true, "was sent (the receiver may have it)"
	default:
		return false, "was not sent"
	}
}

// errReplayRefused is what a refused rewind (see rewind) makes the client
// return: the request may have reached the receiver before the connection
// failed.
var errReplayRefused = errors.New("the connection failed after the request was written (not sent again: one POST per attempt)")

// newTransport returns the transport of notify.New: enough idle
// connections for every record of a batch (Go's default of two per host
// would close and re-dial most of them after each batch), on connections
// that count their writes.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 100, 100
	t.DialContext = countWrites(t.DialContext)
	return t
}

package notify_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
)

// A pooled HTTP/1.1 connection the receiver closed (a reset) before the
// next request's bytes left: the write fails with nothing written, so the
// request was not sent, and net/http sends it again at once on a fresh
// connection. One POST reaches the receiver and the delivery succeeds in
// its first attempt. (Counted before the flush, as net/http's WroteRequest
// hook is, the request was taken for sent: the delivery ended "may have
// been sent" with no POST received.)
func TestPooledConnectionClosedByTheReceiverIsSentAgainAtOnce(t *testing.T) {
	h := &countingHandler{then: func(http.ResponseWriter, *http.Request) {}}
	srv := httptest.NewUnstartedServer(h)
	var mu sync.Mutex
	var conns []net.Conn
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}
	quiet(srv)
	srv.Start()
	t.Cleanup(srv.Close)
	n := notify.New(srv.URL, 10*time.Second, notify.Classifier{})
	prime := ev
	prime.Key = primeKey
	if _, err := n.Do(context.Background(), prime); err != nil {
		t.Fatalf("priming delivery: %v", err)
	}

	// The receiver resets the pooled connection while the request is
	// being put together (its first header field is buffered, nothing
	// flushed), and the hook returns once the client's transport has seen
	// the reset and closed its end: no byte of the request can leave on it.
	var (
		client net.Conn
		reused []bool
		closed sync.Once
	)
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			reused = append(reused, i.Reused)
			if client == nil {
				client = i.Conn
			}
		},
		WroteHeaderField: func(string, []string) {
			closed.Do(func() {
				mu.Lock()
				c := conns[0].(*net.TCPConn)
				mu.Unlock()
				_ = c.SetLinger(0) // a reset, not a FIN
				_ = c.Close()
				// Until net/http closes its end (bounded: a hang fails the
				// test below instead of reaching the package's timeout).
				for limit := time.Now().Add(10 * time.Second); client.SetReadDeadline(time.Time{}) == nil && time.Now().Before(limit); {
					time.Sleep(time.Millisecond)
				}
			})
		},
	})
	out, rec := deliverIn(ctx, t, n, ev)
	if len(reused) == 0 || !reused[0] {
		t.Fatalf("connections got %v (reused or not); want the pooled one first", reused)
	}
	if out.Err != nil || rec.Status != idem.StatusSucceeded {
		t.Fatalf("outcome %v, record %s; want success (the request had not left, so it went again on a fresh connection)", out.Err, rec.Status)
	}
	if out.Calls != 1 || len(reused) != 2 || reused[1] {
		t.Errorf("attempts %d, connections %v; want 1 attempt, sent again on a fresh connection within it", out.Calls, reused)
	}
	if got := h.count(ev.Key); got != 1 {
		t.Errorf("the receiver read %d POSTs of the delivery; want 1", got)
	}
}

// frameServer is an HTTP/2 receiver written with x/net's framer, so that a
// test can send on cue what net/http's server sends only under load or at
// shutdown. Each request whose body has arrived whole is handed to do,
// which says what becomes of it.
type frameServer struct {
	addr string
	cert *x509.Certificate
	do   func(conn int, stream uint32) frameReply

	mu       sync.Mutex
	conns    int
	answered map[string]int // requests answered 200, per Idempotency-Key
	refused  int            // requests answered with something else
}

type frameReply int

const (
	answer       frameReply = iota // HEADERS :status 200, END_STREAM
	goAway                         // GOAWAY, its last stream id below this one (NO_ERROR)
	refuseStream                   // RST_STREAM REFUSED_STREAM
)

func startFrameServer(t *testing.T, do func(conn int, stream uint32) frameReply) *frameServer {
	t.Helper()
	// httptest's certificate (for 127.0.0.1), on a listener of our own.
	certSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	certSrv.StartTLS()
	certs, cert := certSrv.TLS.Certificates, certSrv.Certificate()
	certSrv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: certs, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &frameServer{addr: ln.Addr().String(), cert: cert, do: do, answered: map[string]int{}}
	var wg sync.WaitGroup
	var open sync.Map
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Store(c, nil)
			s.mu.Lock()
			s.conns++
			n := s.conns
			s.mu.Unlock()
			wg.Go(func() { defer c.Close(); s.serve(c, n) })
		}
	})
	return s
}

func (s *frameServer) serve(c net.Conn, conn int) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	keys := map[uint32]string{}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		var ended uint32
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.MetaHeadersFrame:
			keys[f.StreamID] = headerValue(f, "idempotency-key")
			if f.StreamEnded() {
				ended = f.StreamID
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				ended = f.StreamID
			}
		}
		if ended == 0 {
			continue
		}
		reply := s.do(conn, ended)
		s.mu.Lock()
		if reply == answer {
			s.answered[keys[ended]]++
		} else {
			s.refused++
		}
		s.mu.Unlock()
		switch reply {
		case answer:
			block.Reset()
			_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: ended, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
		case goAway:
			err = fr.WriteGoAway(ended-2, http2.ErrCodeNo, nil)
		case refuseStream:
			err = fr.WriteRSTStream(ended, http2.ErrCodeRefusedStream)
		}
		if err != nil {
			return
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func (s *frameServer) counts(key string) (answered, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered[key], s.refused
}

// A stream the HTTP/2 receiver did not process, by the protocol's word
// (a GOAWAY whose last stream id is below it, a REFUSED_STREAM), was not
// sent, even with the whole request written: net/http sends it again at
// once, on a fresh connection after a GOAWAY, and the delivery succeeds in
// its first attempt with one POST processed. (Every other end is sent:
// the stream reset after the request was read in
// TestTransportFailuresAreReleasedNotStoredAsPermanent.)
func TestHTTP2StreamsTheReceiverDidNotProcessAreSentAgainAtOnce(t *testing.T) {
	tests := []struct {
		name  string
		reply frameReply // to the delivery's first request, on the pooled connection's stream 3
	}{
		{name: "GOAWAY below the stream", reply: goAway},
		{name: "REFUSED_STREAM", reply: refuseStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The priming request is stream 1 of connection 1: answered.
			s := startFrameServer(t, func(conn int, stream uint32) frameReply {
				if conn == 1 && stream == 3 {
					return tt.reply
				}
				return answer
			})
			n := notify.New("https://"+s.addr+"/hooks/secret-path", 10*time.Second, notify.Classifier{})
			pool := x509.NewCertPool()
			pool.AddCert(s.cert)
			n.Client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
			prime := ev
			prime.Key = primeKey
			if _, err := n.Do(context.Background(), prime); err != nil {
				t.Fatalf("priming delivery: %v", err)
			}
			out, rec := deliver(t, n, ev)
			answered, refused := s.counts(ev.Key)
			if out.Err != nil || rec.Status != idem.StatusSucceeded {
				t.Fatalf("outcome %v, record %s; want success (the receiver did not process the stream, so it went again)", out.Err, rec.Status)
			}
			if out.Calls != 1 || answered != 1 || refused != 1 {
				t.Errorf("attempts %d, POSTs processed %d, streams not processed %d; want 1, 1, 1", out.Calls, answered, refused)
			}
		})
	}
}

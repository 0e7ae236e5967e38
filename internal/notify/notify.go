// Package notify is the default action: a webhook delivery. It POSTs the
// event JSON to a downstream URL with an Idempotency-Key header and, when
// a Signer is set, the Standard Webhooks headers (webhook-id is the same
// key), so the downstream can verify the sender and de-duplicate too, and
// classifies the reply.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/webhooksig"
)

// DefaultTimeout bounds each request when Notifier.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// maxSummary bounds the part of the downstream's reply kept in the record.
const maxSummary = 256

// Notifier delivers events to one URL. Once configured it is safe for
// concurrent use: every delivery shares its Client (and connection pool)
// and its Signer, which must be safe for concurrent use too.
type Notifier struct {
	URL string
	// Client is reused across calls (connection reuse). Nil means a client
	// with default transport settings.
	Client *http.Client
	// Timeout bounds each request; the time the invocation leaves for work
	// bounds it too. Zero means DefaultTimeout. The signing keys' re-read,
	// when they are stale, comes before it and is not part of it.
	Timeout time.Duration
	// Classifier decides which statuses are transient.
	Classifier Classifier
	// Now is the clock for Retry-After dates and signatures. Nil means time.Now.
	Now func() time.Time
	// Signer, if set, gives the live signing keys. Nil sends deliveries
	// unsigned (WEBHOOK_SIGNING=off).
	Signer Signer
}

// Signer holds the webhook signing keys (see package secretsource).
type Signer interface {
	// Keys returns the live keys, current first.
	Keys(ctx context.Context) ([][]byte, error)
	// Reads returns how many reads of the keys have begun so far: a mark
	// taken when a request is sent.
	Reads() uint64
	// Recheck returns the keys of a read that began after mark, or an
	// error when there is none to be had (not allowed yet, only an older
	// read in flight, or the read failed). A refusal is judged only by
	// such a read: one begun before the request was sent may predate a
	// rotation.
	Recheck(ctx context.Context, mark uint64) ([][]byte, error)
}

// New returns a Notifier for url, with its own HTTP client: it keeps
// enough idle connections for every record of a batch, and its
// connections count what they write, which decides whether a request that
// failed was sent (see post). A Notifier with another Client takes any
// request written as sent.
func New(url string, timeout time.Duration, classifier Classifier) *Notifier {
	return &Notifier{URL: url, Timeout: timeout, Classifier: classifier, Client: &http.Client{
		Transport: newTransport(),
		// A redirect is not a delivery: Go would turn the POST into a
		// body-less GET on 301/302/303. The 3xx is classified instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Fits reports whether one request fits in work, the time an invocation
// leaves for work. If not, requests are cut to the time left (the action's
// context ends first), which a NOTIFY_TIMEOUT longer than the function's
// timeout makes the rule: the error says so, naming both values.
func (n *Notifier) Fits(work time.Duration) error {
	timeout := cmp.Or(n.Timeout, DefaultTimeout)
	if timeout <= work {
		return nil
	}
	return fmt.Errorf("NOTIFY_TIMEOUT (%v) is longer than an invocation leaves for work (%v): every request is cut to the time left; raise the function's timeout or lower NOTIFY_TIMEOUT", timeout, max(work, 0))
}

// What a delivery's record keeps of the downstream's reply. A record over
// 1 KB costs DynamoDB two write units at completion and on every replay's
// reservation, so the summary is bounded well below that.
const (
	// maxReply bounds the reply prefix an API caller gets back (and the
	// record keeps), as JSON: at most 256 bytes of the reply, fewer where
	// JSON escapes would make it longer.
	maxReply = maxSummary
	// maxReplyPrefix bounds, the same way, the prefix kept for an SQS
	// event: nobody reads that reply back, an operator only needs to
	// recognise it.
	maxReplyPrefix = 64
	// maxDrain bounds how much of a reply is read (for its size, its
	// digest and connection reuse).
	maxDrain = 1 << 20
)

// apiSummary is what an API caller gets for a delivered notification, and
// what its record keeps to replay: the downstream's status and the start of
// its reply.
type apiSummary struct {
	Delivered        bool   `json:"delivered"`
	DownstreamStatus int    `json:"downstream_status"`
	Reply            string `json:"reply,omitempty"`
}

// queueSummary is what the record of an SQS event keeps of a delivered
// notification: no caller will read the reply back, so instead of its body
// an operator gets its size, its SHA-256 and a short prefix.
type queueSummary struct {
	Delivered        bool   `json:"delivered"`
	DownstreamStatus int    `json:"downstream_status"`
	ReplyBytes       int64  `json:"reply_bytes"`
	ReplySHA256      string `json:"reply_sha256"`
	ReplyPrefix      string `json:"reply_prefix,omitempty"`
	// ReplyTruncated says the reply was longer than the part read
	// (maxDrain): size and digest cover that part.
	ReplyTruncated bool `json:"reply_truncated,omitempty"`
}

// reply is what post read of the downstream's answer.
type reply struct {
	head      []byte // the first maxSummary bytes
	size      int64  // bytes read, at most maxDrain
	sha256    [sha256.Size]byte
	truncated bool // more followed
}

// summary is the stored result of a delivery answered with status.
func summary(source string, status int, r reply) []byte {
	// Only an API request has a caller who reads the reply back; an event
	// from the queue, an inbound webhook among them, has none.
	if source != action.SourceHTTP {
		return marshal(queueSummary{
			Delivered: true, DownstreamStatus: status, ReplyBytes: r.size, ReplySHA256: hex.EncodeToString(r.sha256[:]),
			ReplyPrefix: jsonPrefix(r.head, maxReplyPrefix), ReplyTruncated: r.truncated,
		})
	}
	return marshal(apiSummary{Delivered: true, DownstreamStatus: status, Reply: jsonPrefix(r.head, maxReply)})
}

// marshal encodes v as JSON without HTML escaping ("<" stays one byte) and
// without the encoder's newline.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // structs of strings, ints and bools always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
}

// jsonPrefix returns the longest prefix of b, cut between characters,
// whose JSON string form (without HTML escaping, quotes not counted) takes
// at most limit bytes. It stops at the first byte that is not UTF-8.
func jsonPrefix(b []byte, limit int) string {
	n, size := 0, 0
	for n < len(b) {
		r, w := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError && w <= 1 {
			break
		}
		esc := w
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
			esc = 2
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			esc = 6
		}
		if size+esc > limit {
			break
		}
		size += esc
		n += w
	}
	return string(b[:n])
}

// Do implements action.Func: one POST of ev.Body.
//
//	2xx                          → success; the status and a short summary are stored
//	                               (API: the reply's first bytes, which the caller
//	                               gets; SQS: the reply's size, digest and a prefix)
//	429, 502, 503, 504           → transient; Retry-After is honoured; 502 and
//	                               504 (a gateway's: the origin may have the
//	                               request) are marked Sent
//	no complete reply (any error
//	of the HTTP client: dial,
//	DNS, TLS, reset, HTTP/2
//	stream reset or GOAWAY, EOF,
//	malformed reply, timeout)    → transient; marked Sent when the request was
//	                               (or may have been) written, which ends the
//	                               delivery's attempts (see post)
//	401, 403 with a Signer       → judged by a read of the keys begun after the
//	                               request was sent: the keys it was signed with
//	                               (permanent), or rotated ones (one more POST,
//	                               signed with them); without such a read,
//	                               transient and the delivery's last POST
//	                               (NextDelivery: released, no pause)
//	other 4xx                    → permanent
//	500 and other statuses       → permanent unless configured transient
//	a URL that makes no request  → permanent
func (n *Notifier) Do(ctx context.Context, ev action.Event) (action.Result, error) {
	// The keys first, outside the request's timeout: when they are stale,
	// Keys waits (within ctx) for the process's one re-read, which runs
	// with its own timeout; a slow Secrets Manager must not cost the POST
	// its time (the attempt would fail). Until the keys are first read
	// (Secrets Manager down at the cold start), the error is transient.
	timeout := cmp.Or(n.Timeout, DefaultTimeout)
	var signed [][]byte
	if n.Signer != nil {
		// The wait for a re-read ends where the request's own time would
		// start: on the API function (6 s, NOTIFY_TIMEOUT 4 s) a hanging
		// Secrets Manager could otherwise cut the POST to what is left,
		// and a receiver answering in 3 s would time out. Past that point
		// the keys held are used (Keys returns them once its ctx ends).
		kctx := ctx
		if d, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			kctx, cancel = context.WithDeadline(ctx, d.Add(-timeout))
			defer cancel()
		}
		var err error
		if signed, err = n.Signer.Keys(kctx); err != nil {
			return action.Result{}, fmt.Errorf("notify: signing keys: %w", err)
		}
	}
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := &sendTrace{signer: n.Signer}
	resp, rep, err := n.post(reqCtx, ev, signed, sent)
	if err != nil {
		return action.Result{}, err
	}
	if (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && n.Signer != nil {
		// The receiver refused our signature. It is judged only by keys a
		// read begun after the request was sent returned (Recheck): if they
		// are the ones it was signed with, no rotation explains it and it
		// stands (permanent); if they differ, a rotation does, and one
		// more try is worth it. Without such a read (suppressed by the
		// recheck interval, only an older read in flight, or a failed
		// one), whether the keys rotated is unknown: the refusal may be
		// ours to fix, a transient error, not a failure stored for good.
		// It ends the delivery, though (NextDelivery): another attempt now
		// would be signed with the same keys and refused the same way.
		// The read runs with its own timeout; Recheck waits for it under
		// ctx, not the request's timeout.
		now, rerr := n.Signer.Recheck(ctx, sent.readsWhenSent())
		if rerr != nil {
			return action.Result{}, idem.TransientNextDelivery(fmt.Errorf("notify: downstream replied %d, and no read of the signing keys begun since the request was sent tells whether they rotated: %w", resp.StatusCode, rerr))
		}
		if !sameKeys(now, signed) {
			// Within what is left of the request's timeout: the second
			// try does not lengthen an attempt. Its own refusal has no
			// read begun after it: transient, and the delivery's last
			// POST (the next delivery judges).
			if resp, rep, err = n.post(reqCtx, ev, now, &sendTrace{}); err != nil {
				return action.Result{}, err
			}
			if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
				return action.Result{}, idem.TransientNextDelivery(fmt.Errorf("notify: downstream replied %d to the request signed with the keys read after a refusal; retried later", resp.StatusCode))
			}
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return action.Result{Status: http.StatusOK, Body: summary(ev.Source, resp.StatusCode, rep)}, nil
	}
	err = n.Classifier.Error(resp.StatusCode, resp.Header.Get("Retry-After"), n.now())
	return action.Result{}, fmt.Errorf("notify: downstream replied %d: %w", resp.StatusCode, err)
}

func (n *Notifier) now() time.Time {
	if n.Now != nil {
		return n.Now()
	}
	return time.Now()
}

// post sends one POST, signed with keys when a Signer is set, and returns
// the reply's status and headers and what it read of the reply (its first
// bytes, size and digest); the body is drained for connection reuse.
//
// Every error the client returns means that no complete reply came (a
// dial, DNS, a TLS handshake or certificate, a reset, an HTTP/2 stream
// reset or GOAWAY, an EOF, a malformed response, a timeout), so it is
// transient whatever its type: only a complete reply, classified by the
// Classifier, can be permanent. Matching such errors by type cannot work
// (net/http's HTTP/2 errors are unexported), so the class comes from what
// happened to the request instead (sendTrace, in wire.go): on HTTP/1.1 the
// bytes written to its connection, on HTTP/2 the protocol's word that a
// stream was not processed. One that left, or may have, is marked Sent
// (the receiver may have it: the engine tries no more in this delivery);
// one that did not may be tried again at once, and net/http does so itself
// on a fresh connection when it can. The error says which, for the
// attempt's log line. A request that cannot be built (a bad URL) is
// permanent.
//
// Errors name the downstream by scheme and host only: a webhook URL's
// path, query and user info are often credentials, and errors are stored,
// logged and returned to API callers.
func (n *Notifier) post(ctx context.Context, ev action.Event, keys [][]byte, sent *sendTrace) (*http.Response, reply, error) {
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, sent.clientTrace()), http.MethodPost, n.URL, bytes.NewReader(ev.Body))
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		return nil, reply{}, idem.Permanent(errors.New("notify: DOWNSTREAM_URL is not a valid URL"))
	}
	req.GetBody = sent.rewind(ev.Body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", ev.Key)
	if n.Signer != nil {
		for k, v := range webhooksig.Headers(ev.Key, n.now(), ev.Body, keys) {
			req.Header.Set(k, v)
		}
	}
	client := n.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		// The *url.Error repeats the whole URL: keep its cause only.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		// Read after Do returned: a write still in flight (an HTTP/2
		// stream cut by the timeout) reports later, which "may have been
		// sent" covers.
		left, how := sent.verdict()
		err = fmt.Errorf("notify: POST to %s: no complete reply, the request %s: %w", origin(req.URL), how, err)
		if left {
			return nil, reply{}, idem.TransientSent(err)
		}
		return nil, reply{}, idem.Transient(err)
	}
	defer resp.Body.Close()
	return resp, readReply(resp.Body), nil
}

// readReply reads up to maxDrain bytes of body (which also drains it for
// connection reuse): its first maxSummary bytes, its size and its SHA-256.
func readReply(body io.Reader) reply {
	var r reply
	h := sha256.New()
	head := io.TeeReader(io.LimitReader(body, maxSummary), h)
	r.head, _ = io.ReadAll(head)
	rest, _ := io.Copy(h, io.LimitReader(body, maxDrain-int64(len(r.head))))
	r.size = int64(len(r.head)) + rest
	if r.size == maxDrain {
		var one [1]byte
		n, _ := body.Read(one[:])
		r.truncated = n > 0
	}
	h.Sum(r.sha256[:0])
	return r
}

// RedactURL returns a URL as it may be printed (in an init error, a log
// line, a stored failure): its scheme and host only. A webhook URL's user
// info, path and query often are its credentials. Text that is not a URL
// with a scheme and a host is described by its length only.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		// url.Parse's error quotes the whole text: never print it.
		return fmt.Sprintf("something that is not a URL with a scheme and a host (%d characters, not shown)", len(raw))
	}
	return origin(u)
}

// origin is u's scheme and host.
func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }

func sameKeys(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

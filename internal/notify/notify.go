// Package notify is the default action: a webhook delivery. It POSTs the
// event JSON to a downstream URL with an Idempotency-Key header, so the
// downstream can de-duplicate too, and classifies the reply.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/idem"
)

// maxSummary bounds the part of the downstream's reply kept in the record.
const maxSummary = 256

// Notifier delivers events to one URL.
type Notifier struct {
	URL string
	// Client is reused across calls (connection reuse). Nil means a client
	// with default transport settings.
	Client *http.Client
	// Timeout bounds each request. Zero means 5s.
	Timeout time.Duration
	// Classifier decides which statuses are transient.
	Classifier idem.HTTPClassifier
	// Now is the clock for Retry-After dates. Nil means time.Now.
	Now func() time.Time
}

// New returns a Notifier for url, with its own HTTP client. The client keeps
// enough idle connections for every record of a batch: Go's default of two
// per host would close and re-dial most of them after each batch.
func New(url string, timeout time.Duration, classifier idem.HTTPClassifier) *Notifier {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 100, 100
	return &Notifier{URL: url, Timeout: timeout, Classifier: classifier, Client: &http.Client{
		Transport: t,
		// A redirect is not a delivery: Go would turn the POST into a
		// body-less GET on 301/302/303. The 3xx is classified instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// summary is the small record kept for a delivered notification.
type summary struct {
	Delivered        bool   `json:"delivered"`
	DownstreamStatus int    `json:"downstream_status"`
	Reply            string `json:"reply,omitempty"`
}

// Do implements action.Func: one POST of ev.Body.
//
//	2xx                          → success; the status and a short summary are stored
//	429, 502, 503, 504, timeout,
//	connection reset             → transient; Retry-After is honoured
//	other 4xx                    → permanent
//	500 and other statuses       → permanent unless configured transient
func (n *Notifier) Do(ctx context.Context, ev action.Event) (action.Result, error) {
	timeout := n.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return action.Result{}, idem.Permanent(fmt.Errorf("notify: bad DOWNSTREAM_URL %q: %w", n.URL, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", ev.Key)
	client := n.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		// A connection closed before the reply (io.EOF) is a reset too.
		if idem.Classify(err) == idem.ClassTransient || errors.Is(err, io.EOF) {
			return action.Result{}, idem.Transient(fmt.Errorf("notify: POST %s: %w", n.URL, err))
		}
		return action.Result{}, fmt.Errorf("notify: POST %s: %w", n.URL, err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxSummary))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // drain for connection reuse
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		s := summary{Delivered: true, DownstreamStatus: resp.StatusCode}
		if utf8.Valid(head) {
			s.Reply = string(head)
		}
		body, _ := json.Marshal(s)
		return action.Result{Status: http.StatusOK, Body: body}, nil
	}
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}
	err = n.Classifier.Error(resp.StatusCode, resp.Header.Get("Retry-After"), now())
	return action.Result{}, fmt.Errorf("notify: downstream replied %d: %w", resp.StatusCode, err)
}

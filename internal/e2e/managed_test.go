package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/sqslocal"
	"github.com/oncely/oncely/internal/testing/webhooksender"
	"github.com/oncely/oncely/internal/webhooksig"
)

// Lambda Managed Instances (issue 23): one process serves several
// invocations at once. The emulator's managed-instances mode (switched on by
// AWS_LAMBDA_MAX_CONCURRENCY in its environment) serves that many
// invocations at once to one runtime process, and aws-lambda-go runs that
// many invoke loops in goroutines of it. The bootstrap here is built with
// the race detector, and with -tags e2efaults, whose store panics on
// "panic-" keys (cmd/handler/faults.go).
//
// No runtime API of our own was needed: the emulator has what the test asks
// for (concurrent invocations to one process, request ids chosen by the
// caller, a deadline per invocation, a late answer refused). Where it falls
// short, package rie works around it (its doc says how): it runs only a
// bootstrap at /var/task/bootstrap (or /var/runtime, /opt), as uid 993, so
// rie runs it as root in a mount namespace of its own; it refuses an invoke
// while no worker is idle, so rie.InvokeAs sends it again; it never replaces
// a runtime that exited (it exits too), which the test reads as the process
// having died.

const (
	managedSlots   = 8 // AWS_LAMBDA_MAX_CONCURRENCY
	managedTimeout = 8 // AWS_LAMBDA_FUNCTION_TIMEOUT, seconds
	// takeOverLease is the lease of the take-over function: short, so that
	// it ends while its owner's invocation is still in flight. The stored
	// lease runs NOTIFY_TIMEOUT (1 s there: the engine's pause) past it,
	// and ends 4 s in, well before the owner's store deadline (7.5 s).
	takeOverLease = 3 * time.Second
)

var (
	raceOnce sync.Once
	raceBoot string
	raceErr  error
)

// raceBootstrap builds the bootstrap with the race detector and the
// e2efaults store, once per test binary.
//
// The emulator's managed-instances mode starts the runtime as uid 993, gid
// 990 (Lambda's sandbox user; its supervisor hard-codes them), which only
// root may do (package rie says how it is run).
func raceBootstrap(t *testing.T) string {
	t.Helper()
	requireE2E(t)
	// Not envRequire: a newcomer's make test as an ordinary user skips this
	// test (the Makefile says so on its last line); make test as root, as CI
	// runs it, sets envRequireManaged and so cannot skip it silently.
	if os.Geteuid() != 0 {
		if os.Getenv(envRequireManaged) != "" {
			t.Fatal("the emulator's managed-instances mode starts the runtime as uid 993 (Lambda's sandbox user), which only root may do: run make test as root, or unset " + envRequireManaged)
		}
		t.Skip("the emulator's managed-instances mode starts the runtime as uid 993, which only root may do")
	}
	raceOnce.Do(func() {
		raceBoot = filepath.Join(filepath.Dir(bootstrap), "bootstrap-race")
		build := exec.Command("go", "build", "-race", "-tags", "lambda.norpc,e2efaults", "-o", raceBoot, "github.com/oncely/oncely/cmd/handler")
		build.Env = append(os.Environ(), "CGO_ENABLED=1") // the race detector needs cgo
		if out, err := build.CombinedOutput(); err != nil {
			raceErr = fmt.Errorf("build the race bootstrap: %v\n%s", err, out)
		}
	})
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	return raceBoot
}

// storeGate is a proxy in front of moto's DynamoDB that holds two kinds of
// request, and passes everything else:
//   - a reservation (PutItem) of an event whose id starts with "stuck-",
//     until its sender gives up (its invocation's store deadline);
//   - the first completion (UpdateItem to SUCCEEDED) of the key commitKey,
//     until the test opens commitRelease.
type storeGate struct {
	t         *testing.T
	target    *httputil.ReverseProxy
	commitKey string // namespace#key

	mu            sync.Mutex
	stuck         map[string]time.Time // key -> when its sender gave up
	stuckHeld     chan string          // a stuck reservation is held
	commitCaught  bool
	commitHeld    chan struct{}
	commitRelease chan struct{}
	closed        chan struct{}
	closeOnce     sync.Once
}

func newStoreGate(t *testing.T, moto, commitKey string) (*storeGate, string) {
	u, err := url.Parse(moto)
	if err != nil {
		t.Fatal(err)
	}
	g := &storeGate{t: t, target: httputil.NewSingleHostReverseProxy(u), commitKey: commitKey, stuck: map[string]time.Time{},
		stuckHeld: make(chan string, 16), commitHeld: make(chan struct{}), commitRelease: make(chan struct{}), closed: make(chan struct{})}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	t.Cleanup(g.close) // runs first: nothing held outlives the test
	return g, srv.URL
}

func (g *storeGate) close() { g.closeOnce.Do(func() { close(g.closed) }) }

func (g *storeGate) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	op, key := ddblocal.Describe(req, body)
	switch {
	case op == "PutItem" && strings.Contains(key, "#evt:stuck-"):
		g.stuckHeld <- key
		select {
		case <-req.Context().Done(): // the sender gave up
		case <-g.closed:
		}
		g.mu.Lock()
		g.stuck[key] = time.Now()
		g.mu.Unlock()
		panic(http.ErrAbortHandler)
	case op == "UpdateItem" && key == g.commitKey && bytes.Contains(body, []byte(`"SUCCEEDED"`)):
		g.mu.Lock()
		first := !g.commitCaught
		g.commitCaught = true
		g.mu.Unlock()
		if first {
			close(g.commitHeld)
			select {
			case <-g.commitRelease:
			case <-g.closed:
				panic(http.ErrAbortHandler)
			}
		}
	}
	g.target.ServeHTTP(w, req)
}

// gaveUp returns when the sender of the stuck reservation of key gave up.
func (g *storeGate) gaveUp(key string) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.stuck[key]
	return at, ok
}

// call is one invocation the test sent.
type call struct {
	id       string   // its request id
	api      bool     // an API request (else an SQS batch)
	messages []string // the SQS batch's message ids
	sent     time.Time
	answered time.Time
	body     []byte
}

// managedFn is a function under the managed-instances mode, with the
// invocations sent to it.
type managedFn struct {
	*fn
	prefix string // of its request ids

	mu       sync.Mutex
	calls    map[string]*call
	n        atomic.Int64
	inFlight atomic.Int64
	maxLive  atomic.Int64
}

func startManaged(t *testing.T, prefix string, o fnOptions) *managedFn {
	t.Helper()
	o.bootstrap = raceBootstrap(t)
	o.timeout = managedTimeout
	// A request held at the downstream stays one attempt: it may take all
	// the time the invocation leaves for work (its timeout less 1 s).
	o.env = append([]string{"AWS_LAMBDA_MAX_CONCURRENCY=" + strconv.Itoa(managedSlots), fmt.Sprintf("NOTIFY_TIMEOUT=%ds", managedTimeout-1)}, o.env...)
	m := &managedFn{fn: startWith(t, o), prefix: prefix, calls: map[string]*call{}}
	// This mode starts the runtime at once; an init that fails ends it.
	waitFor(t, 30*time.Second, "the runtime process did not start (its init failed?)", func() bool { return m.emu.RuntimePID() != 0 })
	return m
}

// invoke sends one invocation with a request id of its own and records it.
func (m *managedFn) invoke(payload []byte, api bool, messages ...string) *call {
	m.t.Helper()
	c := &call{id: fmt.Sprintf("%s-%04d", m.prefix, m.n.Add(1)), api: api, messages: messages, sent: time.Now()}
	m.mu.Lock()
	m.calls[c.id] = c
	m.mu.Unlock()
	live := m.inFlight.Add(1)
	for cur := m.maxLive.Load(); live > cur && !m.maxLive.CompareAndSwap(cur, live); cur = m.maxLive.Load() {
	}
	body, err := m.emu.InvokeAs(context.Background(), c.id, payload)
	m.inFlight.Add(-1)
	if err != nil {
		m.t.Errorf("invocation %s: %v", c.id, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c.answered, c.body = time.Now(), body
	// The caller gets its own copy; checkLines reads the recorded one.
	answered := *c
	return &answered
}

// sqs sends a batch of (message id, body) pairs of a standard queue.
func (m *managedFn) sqs(msgs ...[2]string) *call {
	m.t.Helper()
	ids := make([]string, len(msgs))
	for i, msg := range msgs {
		ids[i] = msg[0]
	}
	return m.invoke(sqsBatch(m.t, msgs...), false, ids...)
}

// api sends a POST /events with an Idempotency-Key.
func (m *managedFn) api(key, body string) *call {
	m.t.Helper()
	return m.invoke(apiPayload(m.t, key, body), true)
}

// failures returns the message ids an SQS invocation sent back, or an error
// when it did not answer with a batch response (a timeout, a function error).
func (c *call) failures() ([]string, error) {
	var resp struct {
		BatchItemFailures *[]struct{ ItemIdentifier string } `json:"batchItemFailures"`
		ErrorMessage      string                             `json:"errorMessage"`
		ErrorType         string                             `json:"errorType"`
	}
	if err := json.Unmarshal(c.body, &resp); err != nil || resp.ErrorMessage != "" || resp.ErrorType != "" {
		return nil, fmt.Errorf("invocation %s answered %q; want an SQS batch response", c.id, c.body)
	}
	ids := []string{}
	if resp.BatchItemFailures != nil {
		for _, f := range *resp.BatchItemFailures {
			ids = append(ids, f.ItemIdentifier)
		}
	}
	return ids, nil
}

// response returns an API invocation's response.
func (c *call) response() (events.APIGatewayV2HTTPResponse, error) {
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(c.body, &resp); err != nil || resp.StatusCode == 0 {
		return resp, fmt.Errorf("invocation %s answered %q; want an HTTP API response", c.id, c.body)
	}
	return resp, nil
}

func eventBody(id string) string { return fmt.Sprintf(`{"id":%q,"action":"notify"}`, id) }
func eventKey(id string) string  { return "evt:" + id + ":notify" }

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what)
		}
	}
}

// parallel runs fn(0..n-1) in goroutines and waits for all of them.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// TestE2EManagedInstances runs the bootstrap, built with the race
// detector, under the emulator's managed-instances mode with
// AWS_LAMBDA_MAX_CONCURRENCY=8, and checks what one process serving eight
// invocations at once must keep: eight in flight at once; SQS batches and
// API requests in parallel, with a signing-key rotation read during their
// deliveries; duplicates of one event in eight concurrent invocations
// running the action once; invocations reaching their deadlines while
// others go on; a panic in one record's processing; an action that ignores
// its context, abandoned in time while seven other invocations run; a take-over while the
// owner's invocation is still in flight in the same process. Then every
// line the process wrote: one whole JSON object each, each record's line
// carrying its own invocation's request id, and no race reported.
func TestE2EManagedInstances(t *testing.T) {
	built := time.Now()
	raceBootstrap(t) // build first, outside the phases' timing
	t.Logf("race bootstrap built in %v", time.Since(built).Round(100*time.Millisecond))
	moto := os.Getenv(ddblocal.EnvMoto)
	down := fakewebhook.New()
	hs := httptest.NewServer(down)
	t.Cleanup(func() { down.Close(); hs.Close() })
	const takeOverID = "takeover-1"
	gate, gateURL := newStoreGate(t, moto, "oncely-mi-lease#"+eventKey(takeOverID))
	store := func(string) string { return gateURL }
	// The signing secret lives on the SQS moto: on DynamoDB's, the eight
	// invocations' store calls queue ahead of the refresh's reads on its
	// one thread, past the refresh's 2 s bound (AWS serves the two apart).
	m := startManaged(t, "mi", fnOptions{down: down, downURL: hs.URL + "/webhook", store: store, name: "oncely-mi", secrets: sqslocal.EndpointFromEnv(),
		env: []string{"WEBHOOK_SECRET_REFRESH=200ms", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024"}})
	lease := startManaged(t, "lease", fnOptions{down: down, downURL: hs.URL + "/webhook", store: store, name: "oncely-mi-lease",
		env: []string{"NOTIFY_TIMEOUT=1s", "IDEMPOTENCY_LEASE=" + takeOverLease.String()}})
	pid := m.emu.RuntimePID()
	if pid == 0 {
		t.Fatal("the managed-instances emulator has no runtime process")
	}
	t.Run("eight in flight at once", func(t *testing.T) {
		// Each invocation's delivery is held until all eight are held: eight
		// invocations in flight at once in one process.
		hold := make(chan struct{})
		for i := range managedSlots {
			down.Script(eventKey(fmt.Sprintf("burst-%d", i)), fakewebhook.Reply{Hold: hold})
		}
		calls := make([]*call, managedSlots)
		done := make(chan struct{})
		go func() {
			parallel(managedSlots, func(i int) {
				calls[i] = m.sqs([2]string{fmt.Sprintf("burst-m%d", i), eventBody(fmt.Sprintf("burst-%d", i))})
			})
			close(done)
		}()
		held := func() int {
			n := 0
			for i := range managedSlots {
				n += down.Count(eventKey(fmt.Sprintf("burst-%d", i)))
			}
			return n
		}
		waitFor(t, 30*time.Second, "the eight deliveries are not all held at once", func() bool { return held() >= managedSlots })
		close(hold)
		<-done
		for _, c := range calls {
			if ids, err := c.failures(); err != nil || len(ids) != 0 {
				t.Errorf("burst: failures %v, %v; want none", ids, err)
			}
		}
		if m.maxLive.Load() != managedSlots {
			t.Errorf("%d invocations in flight at most; want %d", m.maxLive.Load(), managedSlots)
		}
	})

	t.Run("duplicates in eight concurrent invocations run once", func(t *testing.T) {
		// SQS: the owner's delivery is held while seven copies arrive in
		// seven other invocations of the process; each sees the key in
		// progress and goes back to the queue; redelivered, each replays.
		hold := make(chan struct{})
		down.Script(eventKey("dup-x"), fakewebhook.Reply{Hold: hold})
		owner := make(chan *call)
		go func() { owner <- m.sqs([2]string{"dup-x-0", eventBody("dup-x")}) }()
		waitFor(t, 30*time.Second, "the owner's delivery never arrived", func() bool { return down.Count(eventKey("dup-x")) == 1 })
		copies := make([]*call, managedSlots-1)
		parallel(len(copies), func(i int) { copies[i] = m.sqs([2]string{fmt.Sprintf("dup-x-%d", i+1), eventBody("dup-x")}) })
		for i, c := range copies {
			if ids, err := c.failures(); err != nil || !slices.Equal(ids, []string{fmt.Sprintf("dup-x-%d", i+1)}) {
				t.Errorf("a copy while the owner runs: failures %v, %v; want it back to the queue", ids, err)
			}
		}
		close(hold)
		if ids, err := (<-owner).failures(); err != nil || len(ids) != 0 {
			t.Fatalf("the owner: failures %v, %v; want none", ids, err)
		}
		parallel(len(copies), func(i int) { copies[i] = m.sqs([2]string{fmt.Sprintf("dup-x-%d", i+1), eventBody("dup-x")}) })
		for _, c := range copies {
			if ids, err := c.failures(); err != nil || len(ids) != 0 {
				t.Errorf("a redelivered copy: failures %v, %v; want it replayed and acknowledged", ids, err)
			}
		}
		if n := down.Count(eventKey("dup-x")); n != 1 {
			t.Errorf("SQS: %d deliveries of one event sent in %d concurrent invocations; want 1", n, managedSlots)
		}

		// API: the same with one Idempotency-Key: 409 while the first runs,
		// then the first response, replayed.
		apiKey := "order-mi-dup"
		scoped := apigw.ScopedKey("anonymous", apiKey)
		hold = make(chan struct{})
		down.Script(scoped, fakewebhook.Reply{Hold: hold})
		first := make(chan *call)
		go func() { first <- m.api(apiKey, eventBody("dup-y")) }()
		waitFor(t, 30*time.Second, "the first request's delivery never arrived", func() bool { return down.Count(scoped) == 1 })
		retries := make([]*call, managedSlots-1)
		parallel(len(retries), func(i int) { retries[i] = m.api(apiKey, eventBody("dup-y")) })
		for _, c := range retries {
			if resp, err := c.response(); err != nil || resp.StatusCode != http.StatusConflict {
				t.Errorf("a retry while the first runs: %d, %v; want 409", resp.StatusCode, err)
			}
		}
		close(hold)
		want, err := (<-first).response()
		if err != nil || want.StatusCode != http.StatusOK {
			t.Fatalf("the first request: %d, %v; want 200", want.StatusCode, err)
		}
		parallel(len(retries), func(i int) { retries[i] = m.api(apiKey, eventBody("dup-y")) })
		for _, c := range retries {
			resp, err := c.response()
			if err != nil || resp.StatusCode != http.StatusOK || resp.Body != want.Body || resp.Headers["Idempotent-Replayed"] != "true" {
				t.Errorf("a retry after the first: %d %v %q, %v; want the first response, replayed", resp.StatusCode, resp.Headers, resp.Body, err)
			}
		}
		if n := down.Count(scoped); n != 1 {
			t.Errorf("API: %d deliveries for one Idempotency-Key sent in %d concurrent invocations; want 1", n, managedSlots)
		}
	})

	oldKey := decodeKey(t, m.secret)
	newSecret := webhooksender.Alphanumeric(32)
	t.Run("SQS batches and API requests in parallel, the signing key rotated during them", func(t *testing.T) {
		const workers, rounds, maxRounds, hot = managedSlots, 4, 30, 4
		sm := secretsmanager.NewFromConfig(ddblocal.Config(m.secrets, nil))
		newKey := decodeKey(t, "whsec_"+newSecret)
		var completed atomic.Int64
		var signedNew atomic.Bool // a delivery of the load was signed with the new key
		rotated := make(chan struct{})
		go func() {
			defer close(rotated)
			// Halfway through, a new AWSCURRENT version: the function's
			// refresh (every 200 ms) reads it during the deliveries, which
			// go on until one is signed with it.
			for completed.Load() < workers*rounds/2 {
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := sm.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{SecretId: &m.secretARN, SecretString: &newSecret}); err != nil {
				t.Errorf("rotate: %v", err)
				signedNew.Store(true) // let the workers stop
				return
			}
			for !signedNew.Load() && completed.Load() < workers*maxRounds {
				for _, d := range down.Audit() {
					if strings.HasPrefix(d.Key, "evt:load-") && signedWith(d, newKey) {
						signedNew.Store(true)
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		var mu sync.Mutex
		pending := map[string]string{} // SQS message id -> body, not acknowledged yet
		apiBodies := map[string][]string{}
		var apiAgain []string // keys answered 409, to send again
		parallel(workers, func(w int) {
			for r := 0; r < maxRounds && (r < rounds || !signedNew.Load()); r++ {
				id := func(s string) string { return fmt.Sprintf("load-%d-%d-%s", w, r, s) }
				if (w+r)%2 == 0 {
					// Two fresh events, one shared by every worker of the
					// round, and a copy of the first in the same batch.
					h := fmt.Sprintf("load-hot-%d", r%hot)
					msgs := [][2]string{{id("m1"), eventBody(id("a"))}, {id("m2"), eventBody(id("b"))}, {id("m3"), eventBody(h)},
						{id("m4"), eventBody(id("a"))}}
					c := m.sqs(msgs...)
					ids, err := c.failures()
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					for _, msg := range msgs {
						if slices.Contains(ids, msg[0]) {
							pending[msg[0]] = msg[1]
						}
					}
					mu.Unlock()
				} else {
					// A request with a key of its own, or one of a few
					// shared by every worker.
					key := id("k")
					if r%3 == 1 {
						key = fmt.Sprintf("load-hot-key-%d", w%hot)
					}
					resp, err := m.api(key, eventBody(key)).response()
					mu.Lock()
					switch {
					case err != nil:
						t.Error(err)
					case resp.StatusCode == http.StatusConflict:
						apiAgain = append(apiAgain, key)
					case resp.StatusCode == http.StatusOK:
						apiBodies[key] = append(apiBodies[key], resp.Body)
					default:
						t.Errorf("API %s: %d %s; want 200 or 409", key, resp.StatusCode, resp.Body)
					}
					mu.Unlock()
				}
				completed.Add(1)
			}
		})
		<-rotated
		// What went back to the queue (a hot event in progress elsewhere)
		// comes back until acknowledged; so do the 409s.
		for round := 0; len(pending)+len(apiAgain) > 0; round++ {
			if round == 50 {
				t.Fatalf("still not acknowledged after 50 redeliveries: %v, API %v", pending, apiAgain)
			}
			time.Sleep(20 * time.Millisecond)
			for mid, body := range pending {
				ids, err := m.sqs([2]string{mid, body}).failures()
				if err != nil {
					t.Fatal(err)
				}
				if len(ids) == 0 {
					delete(pending, mid)
				}
			}
			again := apiAgain
			apiAgain = nil
			for _, key := range again {
				resp, err := m.api(key, eventBody(key)).response()
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode == http.StatusConflict {
					apiAgain = append(apiAgain, key)
				} else {
					apiBodies[key] = append(apiBodies[key], resp.Body)
				}
			}
		}
		for key, bodies := range apiBodies {
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("API %s answered %q and %q; want one stored response", key, bodies[0], b)
				}
			}
			if n := down.Count(apigw.ScopedKey("anonymous", key)); n != 1 {
				t.Errorf("API %s: %d deliveries; want 1", key, n)
			}
		}
		// Every event of the load, the shared ones and the copies within a
		// batch included, was delivered once.
		events := 0
		for key, n := range down.Counts() {
			if strings.HasPrefix(key, "evt:load-") {
				events++
				if n != 1 {
					t.Errorf("%s: %d deliveries; want 1", key, n)
				}
			}
		}
		if events == 0 {
			t.Error("no event of the load reached the downstream")
		}
		// Sent after the rotation was read: signed with the new key.
		after := m.sqs([2]string{"load-after-m1", eventBody("load-after-a")})
		if ids, err := after.failures(); err != nil || len(ids) != 0 {
			t.Fatalf("after the rotation: failures %v, %v", ids, err)
		}
		sawNew := false
		for _, d := range down.Audit() {
			if !strings.HasPrefix(d.Key, "evt:load-") {
				continue
			}
			signedNew, signedOld := signedWith(d, newKey), signedWith(d, oldKey)
			if !signedNew && !signedOld {
				t.Errorf("delivery %d (%s) verifies with neither the old nor the new key: %v", d.Seq, d.Key, d.Headers)
			}
			if d.Key == eventKey("load-after-a") && !signedNew {
				t.Errorf("a delivery sent after the rotation was read is not signed with the new key: %v", d.Headers)
			}
			sawNew = sawNew || (signedNew && d.Key != eventKey("load-after-a"))
		}
		if !sawNew {
			t.Errorf("no delivery of the parallel load was signed with the new key: the refresh did not happen during them")
		}
	})

	t.Run("invocations reach their own deadlines while others go on", func(t *testing.T) {
		// Three invocations whose reservation DynamoDB never answers, sent
		// a while apart (each its own deadline), each with a fresh event
		// beside it in its batch; five more slots run short invocations
		// meanwhile.
		const stuck = 3
		calls := make([]*call, stuck)
		var quick atomic.Int64
		var allHeld, firstAnswer atomic.Int64 // quick invocations done at each moment
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range managedSlots - stuck {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					c := m.sqs([2]string{fmt.Sprintf("quick-%d-%d", w, i), eventBody(fmt.Sprintf("quick-%d-%d", w, i))})
					if ids, err := c.failures(); err != nil || len(ids) != 0 {
						t.Errorf("a short invocation beside the stuck ones: failures %v, %v; want none", ids, err)
					}
					quick.Add(1)
				}
			})
		}
		var answered sync.WaitGroup
		for i := range stuck {
			answered.Go(func() {
				c := m.sqs([2]string{fmt.Sprintf("stuck-m%d", i), eventBody(fmt.Sprintf("stuck-%d", i))}, [2]string{fmt.Sprintf("stuck-f%d", i), eventBody(fmt.Sprintf("beside-stuck-%d", i))})
				firstAnswer.CompareAndSwap(0, quick.Load()+1)
				calls[i] = c
			})
			select {
			case <-gate.stuckHeld:
			case <-time.After(30 * time.Second):
				t.Fatal("a stuck reservation never reached DynamoDB")
			}
			if i < stuck-1 {
				time.Sleep(500 * time.Millisecond)
			}
		}
		allHeld.Store(quick.Load() + 1)
		answered.Wait()
		close(stop)
		wg.Wait()
		for i, c := range calls {
			ids, err := c.failures()
			if err != nil || !slices.Equal(ids, []string{fmt.Sprintf("stuck-m%d", i)}) {
				t.Errorf("stuck %d: failures %v, %v; want only its stuck record back to the queue, before its deadline", i, ids, err)
				continue
			}
			// Its store calls ended at its own store deadline (its deadline,
			// at least sent + timeout, less the 500 ms respond reserve):
			// never at another's earlier one.
			var gave time.Time
			waitFor(t, 10*time.Second, "the stuck reservation was never given up", func() bool {
				var ok bool
				gave, ok = gate.gaveUp("oncely-mi#" + eventKey(fmt.Sprintf("stuck-%d", i)))
				return ok
			})
			if min := c.sent.Add(managedTimeout*time.Second - 500*time.Millisecond); gave.Before(min.Add(-50 * time.Millisecond)) {
				t.Errorf("stuck %d: gave up %v after it was sent; want at least %v (its own store deadline)", i, gave.Sub(c.sent), min.Sub(c.sent))
			}
		}
		if n := firstAnswer.Load() - allHeld.Load(); n < 3 {
			t.Errorf("%d short invocations finished while all three stuck ones were held; want several (none may wait for another)", n)
		}
	})

	t.Run("a panic in one record's processing", func(t *testing.T) {
		// Six invocations are held at the downstream while a batch with a
		// record whose processing panics and an API request whose
		// processing panics run beside them.
		hold := make(chan struct{})
		for i := range 6 {
			down.Script(eventKey(fmt.Sprintf("beside-%d", i)), fakewebhook.Reply{Hold: hold})
		}
		beside := make([]*call, 6)
		done := make(chan struct{})
		go func() {
			parallel(6, func(i int) {
				beside[i] = m.sqs([2]string{fmt.Sprintf("beside-m%d", i), eventBody(fmt.Sprintf("beside-%d", i))})
			})
			close(done)
		}()
		waitFor(t, 30*time.Second, "the six deliveries are not all held", func() bool {
			n := 0
			for i := range 6 {
				n += down.Count(eventKey(fmt.Sprintf("beside-%d", i)))
			}
			return n == 6
		})
		var batch, req *call
		parallel(2, func(i int) {
			if i == 0 {
				batch = m.sqs([2]string{"panic-m1", eventBody("panic-1")}, [2]string{"panic-m2", eventBody("calm-1")})
			} else {
				req = m.api("panic-api-2", eventBody("panic-api-2"))
			}
		})
		if ids, err := batch.failures(); err != nil || !slices.Equal(ids, []string{"panic-m1"}) {
			t.Errorf("the batch with a panicking record: failures %v, %v; want only that record back to the queue", ids, err)
		}
		var fe struct{ ErrorMessage string }
		if json.Unmarshal(req.body, &fe) != nil || !strings.Contains(fe.ErrorMessage, "internal error") {
			t.Errorf("the panicking API request answered %q; want a function error (API Gateway answers 502)", req.body)
		}
		close(hold)
		<-done
		for _, c := range beside {
			if ids, err := c.failures(); err != nil || len(ids) != 0 {
				t.Errorf("an invocation beside the panics: failures %v, %v; want none", ids, err)
			}
		}
		if got := m.emu.RuntimePID(); got != pid {
			t.Fatalf("the runtime process is %d, was %d: the panic ended it", got, pid)
		}
		if ids, err := m.sqs([2]string{"after-panic-m1", eventBody("after-panic")}).failures(); err != nil || len(ids) != 0 {
			t.Errorf("after the panics: failures %v, %v; want none", ids, err)
		}
	})

	t.Run("an action that ignores its context while seven other invocations run", func(t *testing.T) {
		// One record's action ignores its context for 12 s, past its
		// invocation's 8 s deadline (cmd/handler/faults.go); seven workers
		// keep the other slots busy with short invocations meanwhile. The
		// engine abandons the action at its work deadline: the invocation
		// answers in time, that record back to the queue and the one beside
		// it acknowledged; every other invocation answers; the process
		// survives (an answer after the deadline would have ended it).
		const ignoreMS = 12000
		ignored := fmt.Sprintf(`{"id":"ignore-ctx-1","action":"notify","ignore_ms":%d}`, ignoreMS)
		stop := make(chan struct{})
		var quick atomic.Int64
		var wg sync.WaitGroup
		for w := range managedSlots - 1 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("ign-quick-%d-%d", w, i)
					if ids, err := m.sqs([2]string{"m-" + id, eventBody(id)}).failures(); err != nil || len(ids) != 0 {
						t.Errorf("a short invocation beside the abandoned action: failures %v, %v; want none", ids, err)
						return // one is enough: a dead process fails every invocation
					}
					quick.Add(1)
				}
			})
		}
		before := quick.Load()
		c := m.sqs([2]string{"ignore-m1", ignored}, [2]string{"ignore-m2", eventBody("beside-ignore-1")})
		during := quick.Load() - before
		if ids, err := c.failures(); err != nil || !slices.Equal(ids, []string{"ignore-m1"}) {
			t.Errorf("the invocation whose action ignores its context: failures %v, %v; want only that record back to the queue, answered before the deadline", ids, err)
		}
		if took := c.answered.Sub(c.sent); took >= managedTimeout*time.Second {
			t.Errorf("the invocation whose action ignores its context answered after %v; want before its %d s deadline", took, managedTimeout)
		}
		if line := m.lineOf(c.id, "ignore-m1"); line["outcome"] != "abandoned" {
			t.Errorf("the abandoned record's line %v; want outcome abandoned", line)
		}
		// The abandoned action goes on to its end: its late delivery is
		// recorded under its own token (nothing took the key over).
		waitFor(t, 60*time.Second, "the abandoned action's late completion was never recorded", func() bool {
			return s(m.record(eventKey("ignore-ctx-1")), "status") == "SUCCEEDED"
		})
		close(stop)
		wg.Wait()
		if during < managedSlots-1 {
			t.Errorf("%d short invocations answered while the abandoned one ran; want at least %d (the other slots went on)", during, managedSlots-1)
		}
		if got := m.emu.RuntimePID(); got != pid {
			t.Fatalf("the runtime process is %d, was %d: the abandoned action ended it", got, pid)
		}
		// Redelivered, the message replays the late result.
		if ids, err := m.sqs([2]string{"ignore-m1", ignored}).failures(); err != nil || len(ids) != 0 {
			t.Errorf("the redelivery after the late completion: failures %v, %v; want it replayed", ids, err)
		}
		if n := down.Count(eventKey("ignore-ctx-1")); n != 1 {
			t.Errorf("%d deliveries of the abandoned event; want 1 (the late one)", n)
		}
	})

	t.Run("a take-over while the owner's invocation is in flight", func(t *testing.T) {
		// The owner delivers, but its completion is held at DynamoDB past
		// its 3 s lease; another invocation of the same process takes the
		// key over, delivers and completes; then the owner's completion
		// lands, fenced by its token.
		owner := make(chan *call)
		go func() { owner <- lease.sqs([2]string{"takeover-m1", eventBody(takeOverID)}) }()
		select {
		case <-gate.commitHeld:
		case <-time.After(30 * time.Second):
			t.Fatal("the owner's completion never reached DynamoDB")
		}
		rec := lease.record(eventKey(takeOverID))
		until, err := strconv.ParseInt(s(rec, "lease_until"), 10, 64)
		if err != nil || s(rec, "status") != "IN_PROGRESS" {
			t.Fatalf("the owner's record %v; want IN_PROGRESS with a lease", rec)
		}
		time.Sleep(time.Until(time.UnixMilli(until).Add(50 * time.Millisecond)))
		select {
		case c := <-owner:
			t.Fatalf("the owner answered %q before the take-over; want it still in flight", c.body)
		default:
		}
		taker := lease.sqs([2]string{"takeover-m2", eventBody(takeOverID)})
		if ids, err := taker.failures(); err != nil || len(ids) != 0 {
			t.Fatalf("the take-over: failures %v, %v; want none", ids, err)
		}
		close(gate.commitRelease)
		first := <-owner
		if ids, err := first.failures(); err != nil || !slices.Equal(ids, []string{"takeover-m1"}) {
			t.Errorf("the owner after the take-over: failures %v, %v; want its message back (lease lost)", ids, err)
		}
		rec = lease.record(eventKey(takeOverID))
		if s(rec, "status") != "SUCCEEDED" || s(rec, "attempts") != "2" {
			t.Errorf("the record after both: status %s attempts %s; want SUCCEEDED 2 (the take-over's)", s(rec, "status"), s(rec, "attempts"))
		}
		if n := down.Count(eventKey(takeOverID)); n != 2 {
			t.Errorf("%d deliveries; want 2 (a lease that ends before its owner's completion allows a second run, the documented limit)", n)
		}
		if line := lease.lineOf(first.id, "takeover-m1"); line["outcome"] != "lease_lost" {
			t.Errorf("the owner's record line %v; want outcome lease_lost", line)
		}
	})

	// No phase restarted the process: a runtime that exits ends the
	// emulator in this mode, and every invoke after it would have failed.
	if got := m.emu.RuntimePID(); got != pid {
		t.Errorf("the runtime process is %d, was %d", got, pid)
	}
	lines, collapsed := m.checkLines(t)
	leaseLines, leaseCollapsed := lease.checkLines(t)
	// The settings for the mode: GOMAXPROCS left to Go (the CPUs the
	// process may use, not one), GOMEMLIMIT at 90% of the environment's
	// 1024 MB.
	settings := m.runtimeSettings(t)
	memory := float64(1024 << 20)
	if settings["max_concurrency"] != float64(managedSlots) || (runtime.NumCPU() > 1 && settings["gomaxprocs"] == float64(1)) ||
		settings["gomemlimit_bytes"] != float64(int64(memory*config.MemoryLimitShare)) {
		t.Errorf("runtime settings %v; want max_concurrency %d, gomaxprocs Go's own (%d CPUs here), gomemlimit 90%% of 1024 MiB", settings, managedSlots, runtime.NumCPU())
	}
	t.Logf("figures: %d invocations in flight at once in one process (pid %d); %d copies collapsed (replayed or refused in progress, no action run); %d lines checked; runtime settings %v",
		m.maxLive.Load(), pid, collapsed+leaseCollapsed, lines+leaseLines, settings)
}

// decodeKey returns the key bytes of a whsec_ secret.
func decodeKey(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedWith reports whether one of d's signatures is key's.
func signedWith(d fakewebhook.Delivery, key []byte) bool {
	want := "v1," + webhooksig.Sign(key, d.Headers["webhook-id"], d.Headers["webhook-timestamp"], d.Body)
	return slices.Contains(strings.Fields(d.Headers["webhook-signature"]), want)
}

// platformLine matches the emulator's START, END and REPORT lines (text,
// as Lambda writes them in its text log format), and returns their
// request id.
func platformLine(line string) (id string, ok bool) {
	for _, p := range []string{"START RequestId: ", "END RequestId: ", "REPORT RequestId: "} {
		if rest, found := strings.CutPrefix(line, p); found {
			id, _, _ = strings.Cut(rest, "\t")
			return id, true
		}
	}
	return "", false
}

// functionLines returns the lines the function wrote: the emulator's
// output without its own log lines (text, starting "time=") and its
// platform lines.
func (m *managedFn) functionLines() []string {
	var out []string
	for _, line := range strings.Split(m.emu.Log(), "\n") {
		if _, platform := platformLine(line); line == "" || platform || strings.HasPrefix(line, "time=") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// lineOf returns the record line of messageID written by invocation id.
func (m *managedFn) lineOf(id, messageID string) map[string]any {
	var found map[string]any
	waitFor(m.t, 10*time.Second, "no record line for "+messageID+" from "+id, func() bool {
		for _, line := range m.functionLines() {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["message"] == "record" && l["requestId"] == id && l["messageId"] == messageID {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// runtimeSettings returns the process's "runtime settings" line.
func (m *managedFn) runtimeSettings(t *testing.T) map[string]any {
	t.Helper()
	for _, line := range m.functionLines() {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["message"] == "runtime settings" {
			return l
		}
	}
	t.Errorf("no runtime settings line")
	return nil
}

// checkLines checks every line the function wrote, and returns how many:
// each is one whole JSON object without a repeated member, a log line
// (timestamp, level, message) or an EMF document (_aws); each record's and
// request's line carries the request id of the invocation that carried it;
// every invocation that answered wrote its lines and one EMF document; no
// race was reported. It also counts the copies that ran no action: record
// and request lines whose outcome is replayed or in_progress.
func (m *managedFn) checkLines(t *testing.T) (checked, collapsed int) {
	t.Helper()
	m.mu.Lock()
	calls := make(map[string]*call, len(m.calls))
	wantRecords, wantEMF := 0, 0
	for id, recorded := range m.calls {
		c := *recorded // an invocation still in flight (a failed phase) goes on
		calls[id] = &c
		if c.api {
			if _, err := c.response(); err == nil {
				wantRecords++
				wantEMF++
			}
		} else if _, err := c.failures(); err == nil {
			wantRecords += len(c.messages)
			wantEMF++
		}
	}
	m.mu.Unlock()
	var lines []string
	var records, emfs int
	// The pipe may still hold the last lines: wait until every answered
	// invocation's lines are in.
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines = m.functionLines()
		records, emfs = 0, 0
		for _, line := range lines {
			switch {
			case strings.Contains(line, `"message":"record"`), strings.Contains(line, `"message":"request"`):
				records++
			case strings.Contains(line, `"_aws":`):
				emfs++
			}
		}
		if (records >= wantRecords && emfs >= wantEMF) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if records != wantRecords || emfs != wantEMF {
		t.Errorf("%d record lines and %d EMF documents; want %d and %d (one per record or request, one per answered invocation)", records, emfs, wantRecords, wantEMF)
	}
	for _, line := range strings.Split(m.emu.Log(), "\n") {
		if strings.Contains(line, "DATA RACE") {
			t.Errorf("the race detector reported a race (the report follows in the output)")
			break
		}
		// Each platform line names an invocation the test sent.
		if id, ok := platformLine(line); ok && calls[id] == nil {
			t.Errorf("platform line of an invocation nobody sent: %q", line)
		}
	}
	for i, line := range lines {
		if dup, err := repeatedMember(line); err != nil || dup != "" {
			t.Errorf("line %d is not one whole JSON object without repeated members (%v, repeated %q): %q", i, err, dup, line)
			continue
		}
		var l map[string]any
		_ = json.Unmarshal([]byte(line), &l)
		if _, ok := l["_aws"]; ok {
			if l["Source"] != "sqs" && l["Source"] != "http" {
				t.Errorf("EMF document without its Source: %q", line)
			}
			continue
		}
		if l["timestamp"] == nil || l["level"] == nil || l["message"] == nil {
			t.Errorf("line %d is neither a log line nor an EMF document: %q", i, line)
			continue
		}
		id, _ := l["requestId"].(string)
		c := calls[id]
		if o := l["outcome"]; o == "replayed" || o == "in_progress" {
			collapsed++
		}
		switch l["message"] {
		case "record":
			if c == nil || c.api || !slices.Contains(c.messages, l["messageId"].(string)) {
				t.Errorf("record line of %v with requestId %q: not an invocation that carried it", l["messageId"], id)
			}
		case "request":
			if c == nil || !c.api {
				t.Errorf("request line with requestId %q: not an API invocation", id)
			}
		default:
			if id != "" && c == nil {
				t.Errorf("line with requestId %q, which no invocation had: %q", id, line)
			}
		}
	}
	return len(lines), collapsed
}

// repeatedMember returns the first top-level member name that appears twice
// in the JSON object line, or an error if line is not one JSON object.
func repeatedMember(line string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", fmt.Errorf("not a JSON object (%v)", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		name := tok.(string)
		if seen[name] {
			return name, nil
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", err
		}
	}
	if _, err := dec.Token(); err != nil {
		return "", err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("more after the object")
	}
	return "", nil
}

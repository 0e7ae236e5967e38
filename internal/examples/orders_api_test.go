package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.yaml.in/yaml/v3"

	"github.com/oncely/oncely/apigw"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/rie"
	"github.com/oncely/oncely/internal/testing/samtemplate"
)

// issuer is the JWT issuer the function is configured with (JWT_ISSUER),
// as the template passes it the authorizer's.
const issuer = "https://issuer.example.com"

// reservation is one call the fake inventory service got.
type reservation struct {
	key, item string
	status    int
}

// inventory is a fake inventory service (POST /reservations): it records
// every call, and answers 201 with a reservation id; 503 to the first
// call for an item in busyOnce; 409 to the item "discontinued"; and holds
// the first call for an item in hold until that item's channel is closed,
// announcing it on arrived first (a second call is not held: a function
// that calls twice fails its test instead of waiting for its timeout).
type inventory struct {
	mu       sync.Mutex
	calls    []reservation
	busyOnce map[string]bool
	hold     map[string]chan struct{}
	arrived  chan string
}

func (s *inventory) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	var body struct {
		Item string `json:"item"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	status := http.StatusCreated
	switch {
	case r.URL.Path != "/reservations":
		status = http.StatusNotFound
	case body.Item == "discontinued":
		status = http.StatusConflict
	case s.busyOnce[body.Item]:
		delete(s.busyOnce, body.Item)
		status = http.StatusServiceUnavailable
	}
	s.calls = append(s.calls, reservation{key: r.Header.Get("Idempotency-Key"), item: body.Item, status: status})
	n := len(s.calls)
	release := s.hold[body.Item]
	delete(s.hold, body.Item)
	s.mu.Unlock()
	if release != nil {
		s.arrived <- body.Item
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	fmt.Fprintf(rw, `{"reservationId":"res-%d"}`, n)
}

// to returns the calls made with the downstream key key.
func (s *inventory) to(key string) []reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []reservation
	for _, c := range s.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

// count returns the number of calls so far.
func (s *inventory) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// holdFirstCall makes the next call for item wait until the returned
// function is called.
func (s *inventory) holdFirstCall(item string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hold[item] = ch
	return sync.OnceFunc(func() { close(ch) })
}

// ordersAPI is the example running under two emulators on one table: two
// execution environments of one function, as Lambda serves two requests at
// once (the emulator serves one invoke at a time in its default mode).
type ordersAPI struct {
	stock *inventory
	a, b  *rie.Emulator
}

// startOrdersAPI starts the inventory service, local DynamoDB (minidyn),
// and the function twice under the emulator, with the template's timeout,
// and warms both up (an emulator starts its runtime on the first invoke)
// with a request without a key, which must be refused before any call.
func startOrdersAPI(t *testing.T) *ordersAPI {
	t.Helper()
	requireEmulator(t)
	tpl, err := samtemplate.Load(filepath.Join(examplesDir, "orders-api", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fn, ok := tpl.Functions["OrdersApiFunction"]
	if !ok {
		t.Fatal("the template has no OrdersApiFunction")
	}
	api := &ordersAPI{stock: &inventory{busyOnce: map[string]bool{}, hold: map[string]chan struct{}{}, arrived: make(chan string, 1)}}
	srv := httptest.NewServer(api.stock)
	t.Cleanup(srv.Close)
	_, ddb := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ddb, nil))
	table := ddblocal.NewTable(t, client)
	bootstrap := buildExample(t, "orders-api")
	env := []string{"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(fn.Timeout/time.Second)),
		"TABLE_NAME=" + table, "INVENTORY_API_URL=" + srv.URL, "JWT_ISSUER=" + issuer}
	api.a = startBootstrap(t, "orders-api", bootstrap, ddb, env...)
	api.b = startBootstrap(t, "orders-api", bootstrap, ddb, env...)
	for _, emu := range []*rie.Emulator{api.a, api.b} {
		if resp := api.post(t, emu, "alice", "", `{"item":"book","quantity":1}`); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("without an Idempotency-Key: %d %s; want 400", resp.StatusCode, resp.Body)
		}
	}
	if n := api.stock.count(); n != 0 {
		t.Fatalf("requests without a key made %d inventory calls; want none", n)
	}
	return api
}

// post sends POST /orders as API Gateway would after its JWT authorizer
// accepted a token of issuer with subject sub, with Idempotency-Key key
// (none if empty), through emu; it returns the function's response.
func (api *ordersAPI) post(t *testing.T, emu *rie.Emulator, sub, key, body string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := invokeOrders(emu, sub, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// invokeOrders is post for a goroutine (which must not call t.Fatal).
func invokeOrders(emu *rie.Emulator, sub, key, body string) (events.APIGatewayV2HTTPResponse, error) {
	headers := map[string]string{"content-type": "application/json", "authorization": "Bearer eyJ.test.token"}
	if key != "" {
		headers["idempotency-key"] = key
	}
	req := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /orders", RawPath: "/orders", Headers: headers, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{RouteKey: "POST /orders", Stage: "$default", RequestID: "req-" + sub + "-" + key,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders", Protocol: "HTTP/1.1", SourceIP: "192.0.2.1"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: map[string]string{"iss": issuer, "sub": sub, "aud": "orders-client"}}}}}
	payload, _ := json.Marshal(req)
	out, err := emu.Invoke(context.Background(), payload)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("invoke: %w", err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode == 0 {
		return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("the function answered %s; want an API Gateway v2 response", out)
	}
	return resp, nil
}

// downstreamKey is the key the function must send the inventory service
// for sub's Idempotency-Key key: scoped by the caller.
func downstreamKey(sub, key string) string {
	return apigw.ScopedKey(apigw.JWTScope(issuer, sub, issuer), key)
}

// wantOrder checks that resp is a created order, replayed or not.
func wantOrder(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, replayed bool) {
	t.Helper()
	var o struct {
		OrderID, ReservationID string
	}
	_ = json.Unmarshal([]byte(resp.Body), &o)
	if resp.StatusCode != http.StatusCreated || o.OrderID == "" || o.ReservationID == "" {
		t.Fatalf("%s: %d %s; want 201 with an order", what, resp.StatusCode, resp.Body)
	}
	if got := resp.Headers[apigw.HeaderReplayed] == "true"; got != replayed {
		t.Fatalf("%s: %s: %q; want replayed %v", what, apigw.HeaderReplayed, resp.Headers[apigw.HeaderReplayed], replayed)
	}
}

// wantProblem checks resp's status and problem code, and that a 409 or a
// 503 says when to retry.
func wantProblem(t *testing.T, what string, resp events.APIGatewayV2HTTPResponse, status int, code string) {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(resp.Body), &p)
	if resp.StatusCode != status || p.Code != code {
		t.Fatalf("%s: %d %s; want %d with code %s", what, resp.StatusCode, resp.Body, status, code)
	}
	if status == http.StatusConflict || status == http.StatusServiceUnavailable {
		if secs, err := strconv.Atoi(resp.Headers["Retry-After"]); err != nil || secs < 1 {
			t.Fatalf("%s: Retry-After %q; want whole seconds, at least 1", what, resp.Headers["Retry-After"])
		}
	}
}

func wantCalls(t *testing.T, api *ordersAPI, sub, key string, want int) {
	t.Helper()
	if got := len(api.stock.to(downstreamKey(sub, key))); got != want {
		t.Fatalf("the inventory service got %d calls with %s's scoped key %q; want %d", got, sub, key, want)
	}
}

func TestOrdersAPIUnderTheEmulator(t *testing.T) {
	api := startOrdersAPI(t)
	const order = `{"item":"book","quantity":2}`

	t.Run("ARetryReplaysTheOrder", func(t *testing.T) {
		// The client's retry lands on the other execution environment.
		first := api.post(t, api.a, "alice", "key-replay-0001", order)
		again := api.post(t, api.b, "alice", "key-replay-0001", order)
		wantOrder(t, "the first request", first, false)
		wantOrder(t, "its retry", again, true)
		if again.Body != first.Body || again.Headers["Location"] != first.Headers["Location"] {
			t.Fatalf("the retry answered %s (Location %q); want the first answer, %s (Location %q)",
				again.Body, again.Headers["Location"], first.Body, first.Headers["Location"])
		}
		wantCalls(t, api, "alice", "key-replay-0001", 1)
	})

	t.Run("AConcurrentRetryGets409", func(t *testing.T) {
		release := api.stock.holdFirstCall("lamp")
		defer release()
		body := `{"item":"lamp","quantity":1}`
		type answer struct {
			resp events.APIGatewayV2HTTPResponse
			err  error
		}
		firstDone := make(chan answer, 1)
		go func() {
			resp, err := invokeOrders(api.a, "alice", "key-concurrent-01", body)
			firstDone <- answer{resp, err}
		}()
		// Once the first request is inside the inventory call, it has
		// reserved the key (oncely reserves before the handler runs).
		var first answer
		select {
		case item := <-api.stock.arrived:
			if item != "lamp" {
				t.Fatalf("the inventory service got %q; want the held lamp", item)
			}
		case first = <-firstDone:
			t.Fatalf("the first request was answered before it reached the inventory service: %+v", first)
		}
		second := api.post(t, api.b, "alice", "key-concurrent-01", body)
		release()
		if first = <-firstDone; first.err != nil {
			t.Fatal(first.err)
		}
		wantProblem(t, "the retry while the first is in flight", second, http.StatusConflict, "IN_PROGRESS")
		wantOrder(t, "the first request", first.resp, false)
		wantOrder(t, "a retry after it", api.post(t, api.b, "alice", "key-concurrent-01", body), true)
		wantCalls(t, api, "alice", "key-concurrent-01", 1)
	})

	t.Run("AnotherBodyWithTheSameKeyGets422", func(t *testing.T) {
		wantOrder(t, "the first request", api.post(t, api.a, "alice", "key-reused-0001", order), false)
		other := api.post(t, api.a, "alice", "key-reused-0001", `{"item":"book","quantity":3}`)
		wantProblem(t, "another body with the same key", other, http.StatusUnprocessableEntity, "KEY_REUSED")
		wantCalls(t, api, "alice", "key-reused-0001", 1)
	})

	t.Run("ATransientFailureGets503AndTheRetrySucceeds", func(t *testing.T) {
		api.stock.mu.Lock()
		api.stock.busyOnce["pen"] = true
		api.stock.mu.Unlock()
		body := `{"item":"pen","quantity":10}`
		wantProblem(t, "the inventory service's 503", api.post(t, api.a, "alice", "key-transient-1", body), http.StatusServiceUnavailable, "TRANSIENT_FAILURE")
		wantCalls(t, api, "alice", "key-transient-1", 1)
		// The key was released: the retry runs the handler again.
		wantOrder(t, "the retry", api.post(t, api.b, "alice", "key-transient-1", body), false)
		wantCalls(t, api, "alice", "key-transient-1", 2)
	})

	t.Run("AStockRefusalIsStoredAndReplayed", func(t *testing.T) {
		body := `{"item":"discontinued","quantity":1}`
		first := api.post(t, api.a, "alice", "key-refused-001", body)
		again := api.post(t, api.b, "alice", "key-refused-001", body)
		wantProblem(t, "the inventory service's 409", first, http.StatusUnprocessableEntity, "STOCK_REFUSED")
		wantProblem(t, "its retry", again, http.StatusUnprocessableEntity, "STOCK_REFUSED")
		if again.Headers[apigw.HeaderReplayed] != "true" || again.Body != first.Body {
			t.Fatalf("the retry: %s, %s %q; want the first answer replayed, %s", again.Body, apigw.HeaderReplayed, again.Headers[apigw.HeaderReplayed], first.Body)
		}
		wantCalls(t, api, "alice", "key-refused-001", 1)
	})

	t.Run("TwoCallersWithOneKeyAreTwoOrders", func(t *testing.T) {
		alice := api.post(t, api.a, "alice", "key-shared-0001", order)
		// Bob chose the same key, with another body: not KEY_REUSED, and
		// not Alice's order either.
		bob := api.post(t, api.b, "bob", "key-shared-0001", `{"item":"chair","quantity":4}`)
		wantOrder(t, "alice's request", alice, false)
		wantOrder(t, "bob's request with alice's key", bob, false)
		if bob.Body == alice.Body {
			t.Fatalf("bob got alice's order %s", alice.Body)
		}
		aliceAgain := api.post(t, api.b, "alice", "key-shared-0001", order)
		wantOrder(t, "alice's retry", aliceAgain, true)
		if aliceAgain.Body != alice.Body {
			t.Fatalf("alice's retry answered %s; want her order %s", aliceAgain.Body, alice.Body)
		}
		wantCalls(t, api, "alice", "key-shared-0001", 1)
		wantCalls(t, api, "bob", "key-shared-0001", 1)
	})

	t.Run("ReplaysAreLogged", func(t *testing.T) {
		wantOrder(t, "the first request", api.post(t, api.a, "carol", "key-logged-0001", order), false)
		wantOrder(t, "its retry", api.post(t, api.a, "carol", "key-logged-0001", order), true)
		// Stopped, the emulator has copied all the function's output.
		api.a.Stop()
		var lines []string
		for line := range strings.Lines(api.a.Log()) {
			if strings.Contains(line, "replayed a stored response") && strings.Contains(line, "key-logged-0001") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%d log lines of the replay (OnReplay) of key-logged-0001: %q; want 1", len(lines), lines)
		}
	})
}

// TestOrdersAPITemplateAuthorizesItsRoute: keys are scoped by the caller
// the authorizer names; without one, every caller shares one key space. So
// the HTTP API's default authorizer is a JWT one, the function is told its
// issuer (a token of that issuer is scoped by its sub alone), and POST
// /orders reaches the function in payload format 2.0, the one apigw serves.
func TestOrdersAPITemplateAuthorizesItsRoute(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(examplesDir, "orders-api", "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				Auth struct {
					DefaultAuthorizer string `yaml:"DefaultAuthorizer"`
					Authorizers       map[string]struct {
						JwtConfiguration struct {
							Issuer yaml.Node `yaml:"issuer"`
						} `yaml:"JwtConfiguration"`
					} `yaml:"Authorizers"`
				} `yaml:"Auth"`
				Environment struct {
					Variables map[string]yaml.Node `yaml:"Variables"`
				} `yaml:"Environment"`
				Events map[string]struct {
					Type       string `yaml:"Type"`
					Properties struct {
						ApiID                yaml.Node `yaml:"ApiId"`
						Method               string    `yaml:"Method"`
						Path                 string    `yaml:"Path"`
						PayloadFormatVersion string    `yaml:"PayloadFormatVersion"`
					} `yaml:"Properties"`
				} `yaml:"Events"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &tpl); err != nil {
		t.Fatal(err)
	}
	apis, routes := map[string]yaml.Node{}, 0
	for name, r := range tpl.Resources {
		if r.Type == "AWS::Serverless::HttpApi" {
			auth := r.Properties.Auth
			jwt, ok := auth.Authorizers[auth.DefaultAuthorizer]
			if auth.DefaultAuthorizer == "" || !ok || jwt.JwtConfiguration.Issuer.Value == "" {
				t.Errorf("%s: DefaultAuthorizer %q, not a JWT authorizer of its Authorizers: every caller would share one key space", name, auth.DefaultAuthorizer)
			}
			apis[name] = jwt.JwtConfiguration.Issuer
		}
	}
	for name, r := range tpl.Resources {
		if r.Type != "AWS::Serverless::Function" {
			continue
		}
		for ev, e := range r.Properties.Events {
			p := e.Properties
			issuer, ok := apis[p.ApiID.Value]
			if e.Type != "HttpApi" || !ok || p.ApiID.Tag != "!Ref" {
				t.Errorf("%s.Events.%s: a %s event on %s %q; want an HttpApi event on this template's HTTP API", name, ev, e.Type, p.ApiID.Tag, p.ApiID.Value)
				continue
			}
			routes++
			if p.Method != "POST" || p.Path != "/orders" || p.PayloadFormatVersion != "2.0" {
				t.Errorf("%s.Events.%s: %s %s, payload format %q; want POST /orders, \"2.0\"", name, ev, p.Method, p.Path, p.PayloadFormatVersion)
			}
			if got := r.Properties.Environment.Variables["JWT_ISSUER"]; got.Tag != issuer.Tag || got.Value != issuer.Value {
				t.Errorf("%s: JWT_ISSUER is %s %q; want the authorizer's issuer, %s %q", name, got.Tag, got.Value, issuer.Tag, issuer.Value)
			}
		}
	}
	if routes != 1 {
		t.Errorf("%d routes to a function; want POST /orders", routes)
	}
}

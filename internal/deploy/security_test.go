package deploy

import (
	"cmp"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/notify"
	"github.com/oncely/oncely/internal/sqsvisibility"
)

const samconfigPath = "../../samconfig.toml"

// The receivers the API function promises to serve in one call: one that
// answers within promisedAnswer is called once and the caller gets its
// reply. answerMargin covers a TLS dial to a distant receiver and the
// network both ways; reservationAllowance, the reservation's store call
// before the request starts (DynamoDB answers in milliseconds; this covers
// a throttle and the SDK's retry).
const (
	promisedAnswer       = 3 * time.Second
	answerMargin         = time.Second
	reservationAllowance = 500 * time.Millisecond
)

// number resolves n (a literal or !Ref of a parameter, by its Default) to
// an integer, failing the test otherwise.
func (tpl template) number(t *testing.T, n *yaml.Node, what string) int {
	t.Helper()
	v, err := strconv.Atoi(tpl.resolve(n, nil))
	if err != nil {
		t.Fatalf("%s: got %s, want a number or !Ref a parameter with a numeric Default", what, describe(n))
	}
	return v
}

// literalEnv is fn's environment with literal values (a !Ref to a
// parameter by its Default), and a stand-in for what only a deployment
// knows, as config.Load reads it.
func (tpl template) literalEnv(fn string) func(string) string {
	env := map[string]string{config.EnvFunctionName: fn}
	for k, v := range tpl.env(fn) {
		if v.Kind == yaml.ScalarNode && (!isIntrinsic(v) || v.Tag == "!Ref") {
			env[k] = tpl.resolve(v, nil)
		}
	}
	for _, k := range []string{config.EnvTable, config.EnvLedgerTable, config.EnvDownstreamURLSecret, config.EnvWebhookSecret} {
		if env[k] == "" && tpl.env(fn)[k] != nil {
			env[k] = "deployed-" + k
		}
	}
	return func(k string) string { return env[k] }
}

// The blast radius is bounded: each function reserves its own concurrency,
// and the arithmetic that makes the reservations enough holds for the
// defaults.
func TestConcurrencyIsBounded(t *testing.T) {
	tpl := loadTemplate(t)
	apiFn, queueFn := tpl.split(t)

	t.Run("the queue function reserves its mappings' concurrency", func(t *testing.T) {
		// Throttled pollers' receives count towards maxReceiveCount: a
		// reservation below the mappings' sum pushes messages into the DLQ.
		reserved := tpl.number(t, get(tpl.props(queueFn), "ReservedConcurrentExecutions"), queueFn+".ReservedConcurrentExecutions")
		sum, terms := 0, []string{}
		for _, ev := range tpl.sqsEvents(t) {
			n := tpl.number(t, get(ev.props, "ScalingConfig", "MaximumConcurrency"), ev.String()+".ScalingConfig.MaximumConcurrency")
			sum += n
			terms = append(terms, ev.name+" "+strconv.Itoa(n))
		}
		if reserved < sum {
			t.Errorf("%s: ReservedConcurrentExecutions %d; want >= the sum of its mappings' MaximumConcurrency (%s = %d)", queueFn, reserved, strings.Join(terms, " + "), sum)
		}
	})

	// NOTIFY_TIMEOUT is derived from one rule: after a POST that failed
	// once written (a timeout above all), no second POST starts in the same
	// invocation (the engine's rule, idem.ClassifiedError.Sent), and the
	// event comes back with its backoff. So the first request must be long
	// enough for the receivers we promise to serve, and must run whole.
	type fn struct {
		id      string
		cfg     config.Config
		timeout time.Duration
	}
	load := func(t *testing.T, id string) fn {
		cfg, err := config.Load(tpl.literalEnv(id))
		if err != nil {
			t.Fatalf("%s's environment: %v", id, err)
		}
		return fn{id, cfg, time.Duration(tpl.functionInt(t, id, "Timeout", defaultFunctionTimeout)) * time.Second}
	}
	notifyTimeout := func(f fn) time.Duration { return cmp.Or(f.cfg.NotifyTimeout, notify.DefaultTimeout) }

	t.Run("the first request runs whole in each function's work time", func(t *testing.T) {
		// The request starts after the reservation (reservationAllowance)
		// and must end by the work deadline (timeout minus the budget's
		// reserve), or it is cut short: a written timeout that ends the
		// delivery with the receiver's answer lost.
		for _, id := range []string{apiFn, queueFn} {
			f := load(t, id)
			work := (idem.Budget{}).WorkTime(f.timeout)
			if need := notifyTimeout(f) + reservationAllowance; need > work {
				t.Errorf("%s: NOTIFY_TIMEOUT %v + %v for the reservation = %v; want <= the work time %v (Timeout %v minus the budget's reserve %v)",
					id, notifyTimeout(f), reservationAllowance, need, work, f.timeout, (idem.Budget{}).Reserve())
			}
		}
	})

	t.Run("the API function calls a receiver that answers in 3 s once, and the caller gets its reply", func(t *testing.T) {
		f := load(t, apiFn)
		if want := promisedAnswer + answerMargin; notifyTimeout(f) < want {
			t.Errorf("%s: NOTIFY_TIMEOUT %v; want >= %v (a receiver answering in %v, plus %v for the dial and the network): a shorter request times out, and the caller gets 503 for a delivery the receiver made",
				apiFn, notifyTimeout(f), want, promisedAnswer, answerMargin)
		}
		queueTimeout := time.Duration(tpl.functionInt(t, queueFn, "Timeout", defaultFunctionTimeout)) * time.Second
		if f.timeout >= queueTimeout {
			t.Errorf("%s: Timeout %v; want shorter than the queue function's %v (a 503 with Retry-After is a fine answer)", apiFn, f.timeout, queueTimeout)
		}
	})

	t.Run("the queue function's in-call attempts run whole", func(t *testing.T) {
		// The attempts, their timeouts and the backoff between them
		// (jitter at its most), plus the budget's reserve: none is cut short
		// by the deadline. (The API function's later attempt, after a
		// failure before the request was written or a complete 429/503,
		// runs on what is left: the budget cuts it.)
		f := load(t, queueFn)
		attempts := cmp.Or(f.cfg.Retry.AttemptsPerDelivery, idem.DefaultAttemptsPerDelivery)
		work := time.Duration(attempts) * notifyTimeout(f)
		for a := 1; a < attempts; a++ {
			d, _ := f.cfg.Retry.Delay(a, 0, 0.999999)
			work += d
		}
		if worst := work + (idem.Budget{}).Reserve(); worst > f.timeout {
			t.Errorf("%s: in-call worst case %v (%d attempts of %v, backoff, reserve %v); want <= its Timeout %v", queueFn, worst, attempts, notifyTimeout(f), (idem.Budget{}).Reserve(), f.timeout)
		}
	})

	t.Run("after a written timeout the next POST waits at least the engine's pause", func(t *testing.T) {
		// The receiver slower than NOTIFY_TIMEOUT may still be working on
		// the POST that timed out. The engine holds the key off for its
		// pause (config.SentPause, the number the wiring passes it), which
		// must give the receiver as long again; the message's next receive
		// is the visibility policy's delay after a sent request (never
		// shorter than the pause), or the queue's visibility timeout when
		// the backoff is off: one that came sooner would only meet
		// IN_PROGRESS and spend a receive of the redrive policy.
		for _, id := range []string{apiFn, queueFn} {
			if f := load(t, id); f.cfg.SentPause() < notifyTimeout(f) {
				t.Errorf("%s: the engine's pause %v; want >= NOTIFY_TIMEOUT %v", id, f.cfg.SentPause(), notifyTimeout(f))
			}
		}
		f := load(t, queueFn)
		pause := f.cfg.SentPause()
		for _, ev := range tpl.sqsEvents(t) {
			if ev.function != queueFn {
				continue
			}
			next, how := time.Duration(intOr(t, get(tpl.props(ev.queue), "VisibilityTimeout"), defaultVisibilityTimeout))*time.Second, ev.queue+"'s VisibilityTimeout (SQS_BACKOFF off)"
			if !f.cfg.QueueBackoff.Off {
				policy := sqsvisibility.Policy{Base: f.cfg.QueueBackoff.Base, Max: f.cfg.QueueBackoff.Max}
				next, how = policy.Delay(sqsvisibility.Sent, 1, pause, 0, 0), "the visibility policy's shortest delay after a sent request"
			}
			if next < pause {
				t.Errorf("%s: the next POST after a written timeout may come %v later (%s); want >= the engine's pause %v", ev, next, how, pause)
			}
		}
	})

	t.Run("the stage's throttling fits in the API function's reservation", func(t *testing.T) {
		// A token bucket admits at most burst + rate x T requests in any T
		// seconds, and a request holds an execution for at most the
		// function's timeout T: that many executions at once, at most.
		reserved := tpl.number(t, get(tpl.props(apiFn), "ReservedConcurrentExecutions"), apiFn+".ReservedConcurrentExecutions")
		timeout := tpl.functionInt(t, apiFn, "Timeout", defaultFunctionTimeout)
		for _, st := range tpl.ofType("AWS::ApiGatewayV2::Stage") {
			rs := get(tpl.props(st), "DefaultRouteSettings")
			rate := tpl.number(t, get(rs, "ThrottlingRateLimit"), st+".ThrottlingRateLimit")
			burst := tpl.number(t, get(rs, "ThrottlingBurstLimit"), st+".ThrottlingBurstLimit")
			if need := rate*timeout + burst; need > reserved {
				t.Errorf("%s: rate %d/s x %s Timeout %d s + burst %d = %d concurrent requests; want <= %s's ReservedConcurrentExecutions %d",
					st, rate, apiFn, timeout, burst, need, apiFn, reserved)
			}
		}
	})
}

// NONE lets anyone make the function deliver signed bodies of their
// choosing: a CloudFormation rule refuses it without the acknowledgement.
func TestPublicAPINeedsAcknowledgement(t *testing.T) {
	tpl := loadTemplate(t)
	jwt := map[string]string{"ApiAuth": "JWT", "JwtIssuer": "https://issuer.example", "JwtAudience": "client-1"}
	tests := []struct {
		name    string
		params  map[string]string
		refused bool
	}{
		{"the defaults", nil, false},
		{"NONE alone", map[string]string{"ApiAuth": "NONE"}, true},
		{"NONE acknowledged", map[string]string{"ApiAuth": "NONE", "PublicApiAcknowledged": "anyone-can-trigger-deliveries"}, false},
		{"JWT with issuer and audience", jwt, false},
		{"JWT without an issuer", map[string]string{"ApiAuth": "JWT", "JwtAudience": "client-1"}, true},
	}
	for _, tt := range tests {
		got := tpl.rulesRefuse(tt.params)
		if (len(got) > 0) != tt.refused {
			t.Errorf("%s: rules refuse %q; want refused: %v", tt.name, got, tt.refused)
		}
	}
	p := get(tpl.root, "Parameters", "PublicApiAcknowledged")
	if def := str(get(p, "Default")); def == "anyone-can-trigger-deliveries" {
		t.Errorf("PublicApiAcknowledged Default %q; want a value that does not acknowledge", def)
	}
}

func TestTemplateHygiene(t *testing.T) {
	tpl := loadTemplate(t)
	functions := tpl.ofType("AWS::Serverless::Function")
	retained := func(id string) bool {
		return str(get(tpl.resources[id], "DeletionPolicy")) == "Retain" && str(get(tpl.resources[id], "UpdateReplacePolicy")) == "Retain"
	}
	logGroup := func(t *testing.T, where string, n *yaml.Node, viaArn bool) {
		t.Helper()
		var id string
		var ok bool
		if viaArn {
			var attr string
			id, attr, ok = getAtt(n)
			ok = ok && attr == "Arn"
		} else {
			id, ok = ref(n)
		}
		if !ok || str(get(tpl.resources[id], "Type")) != "AWS::Logs::LogGroup" {
			t.Errorf("%s: got %s, want a reference to an AWS::Logs::LogGroup of this template", where, describe(n))
			return
		}
		p := tpl.props(id)
		if tpl.number(t, get(p, "RetentionInDays"), id+".RetentionInDays") <= 0 {
			t.Errorf("%s: RetentionInDays unset; want logs that expire", id)
		}
		// Lambda has already created /aws/lambda/<function>: declaring that
		// group fails the update.
		if name := str(get(p, "LogGroupName")); strings.HasPrefix(name, "/aws/lambda/") {
			t.Errorf("%s: LogGroupName %q; want a new group (Lambda already created its default one)", id, name)
		}
		if !retained(id) {
			t.Errorf("%s: want DeletionPolicy and UpdateReplacePolicy Retain (the audit trail outlives the stack)", id)
		}
	}

	t.Run("each function logs to a log group with retention", func(t *testing.T) {
		for _, fn := range functions {
			logGroup(t, fn+".LoggingConfig.LogGroup", get(tpl.props(fn), "LoggingConfig", "LogGroup"), false)
		}
	})

	t.Run("the stage logs who sent each request", func(t *testing.T) {
		for _, st := range tpl.ofType("AWS::ApiGatewayV2::Stage") {
			als := get(tpl.props(st), "AccessLogSettings")
			logGroup(t, st+".AccessLogSettings.DestinationArn", get(als, "DestinationArn"), true)
			var format map[string]string
			if err := json.Unmarshal([]byte(str(get(als, "Format"))), &format); err != nil {
				t.Fatalf("%s: AccessLogSettings.Format is not a JSON object of strings: %v", st, err)
			}
			var values []string
			for _, v := range format {
				values = append(values, v)
			}
			for _, want := range []string{"$context.requestId", "$context.identity.userArn", "$context.authorizer.claims.sub", "$context.authorizer.claims.iss"} {
				if !slices.Contains(values, want) {
					t.Errorf("%s: access log fields %q; want %s", st, values, want)
				}
			}
		}
	})

	t.Run("every alarm notifies the optional topic", func(t *testing.T) {
		alarms := tpl.ofType("AWS::CloudWatch::Alarm")
		if len(alarms) == 0 {
			t.Fatal("got no alarms")
		}
		for _, alarm := range alarms {
			p := tpl.props(alarm)
			for _, k := range []string{"AlarmActions", "OKActions"} {
				with := tpl.resolve(get(p, k), map[string]string{"AlarmTopicArn": "arn:aws:sns:us-east-1:111122223333:ops"})
				without := tpl.resolve(get(p, k), map[string]string{"AlarmTopicArn": ""})
				if with != "arn:aws:sns:us-east-1:111122223333:ops" || without != "" {
					t.Errorf("%s: %s gives %q with a topic and %q without; want the topic, and nothing without one", alarm, k, with, without)
				}
			}
		}
	})

	t.Run("both tables are protected from deletion", func(t *testing.T) {
		for _, table := range tpl.ofType("AWS::DynamoDB::Table") {
			if str(get(tpl.props(table), "DeletionProtectionEnabled")) != "true" || !retained(table) {
				t.Errorf("%s: want DeletionProtectionEnabled true and Retain policies", table)
			}
		}
	})

	t.Run("the DLQs are retained", func(t *testing.T) {
		n := 0
		for _, q := range tpl.ofType("AWS::SQS::Queue") {
			if dlq, _, ok := getAtt(get(tpl.props(q), "RedrivePolicy", "deadLetterTargetArn")); ok {
				n++
				if !retained(dlq) {
					t.Errorf("%s (the DLQ of %s): want DeletionPolicy and UpdateReplacePolicy Retain (what it holds was never delivered)", dlq, q)
				}
			}
		}
		if n == 0 {
			t.Error("got no DLQs")
		}
	})

	t.Run("the downstream URL is a NoEcho parameter that samconfig.toml does not hold", func(t *testing.T) {
		if str(get(tpl.root, "Parameters", "DownstreamUrl", "NoEcho")) != "true" {
			t.Errorf("DownstreamUrl: want NoEcho: true (a webhook URL often holds a token)")
		}
		data, err := os.ReadFile(samconfigPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "#") && strings.Contains(line, "DownstreamUrl") {
				t.Errorf("%s: %q; want no DownstreamUrl value in a file that is committed", samconfigPath, line)
			}
		}
	})

	t.Run("operators get two managed policies, scoped to the table, as outputs", func(t *testing.T) {
		want := map[string][]string{
			"OperatorReadOnlyPolicy": slices.Sorted(slices.Values(ddbstore.AdminReadIAMActions())),
			"OperatorPolicy":         slices.Sorted(slices.Values(ddbstore.AdminIAMActions())),
		}
		policies := tpl.ofType("AWS::IAM::ManagedPolicy")
		if !slices.Equal(policies, slices.Sorted(maps.Keys(want))) {
			t.Fatalf("managed policies %v; want %v", policies, slices.Sorted(maps.Keys(want)))
		}
		outputs := map[string]bool{}
		for _, o := range pairs(get(tpl.root, "Outputs")) {
			if id, ok := ref(get(o, "Value")); ok {
				outputs[id] = true
			}
		}
		for _, pol := range policies {
			var got []string
			for _, st := range items(get(tpl.props(pol), "PolicyDocument", "Statement")) {
				actions := scalars(get(st, "Action"))
				for _, res := range items(get(st, "Resource")) {
					id, attr, ok := getAtt(res)
					switch {
					case ok && attr == "Arn" && id == "IdempotencyTable":
					case res.Tag == "!Sub" && res.Value == "${IdempotencyTable.Arn}/index/*":
						// Query on the triage index needs the index's ARN.
					default:
						t.Errorf("%s: Resource %s; want the records table or its indexes only", pol, describe(res))
					}
				}
				got = append(got, actions...)
			}
			got = slices.Compact(slices.Sorted(slices.Values(got)))
			if !slices.Equal(got, want[pol]) {
				t.Errorf("%s: actions %q; want %q", pol, got, want[pol])
			}
			if !outputs[pol] {
				t.Errorf("%s: no output names it; want one (the operating docs use it)", pol)
			}
		}
	})
}

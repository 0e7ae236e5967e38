package deploy

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/oncely/oncely/dynamostore"
	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/emf"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/ledger"
	"github.com/oncely/oncely/internal/receiving"
	"github.com/oncely/oncely/internal/router"
	"github.com/oncely/oncely/internal/secretsource"
	"github.com/oncely/oncely/internal/sqssend"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/samtemplate"
)

const (
	templatePath = "../../template.yaml"
	makefilePath = "../../mk/sam.mk"
	envVarsPath  = "../../env.json"
	eventsDir    = "../../events"
)

// unauthenticatedRoutes are the routes that take no ApiAuth, by route
// key, with what verifies their callers instead. A route listed here is
// exempt from the authorizer check and from the NONE acknowledgement
// (PublicApiNeedsAcknowledgement): its callers are not anonymous.
var unauthenticatedRoutes = map[string]string{
	receiving.WebhookRouteKey: "the API function verifies each delivery's signature with its sender's secret (package inbound) before it queues anything; created only with InboundWebhooks=on",
}

// eventSourceMappingActions are what Lambda's SQS event source mapping
// calls with the function's role (AWS's AWSLambdaSQSQueueExecutionRole,
// which SAM would attach on every resource): the queue function's role
// grants them on its source queues only.
var eventSourceMappingActions = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}

// lambdaLogActions are what Lambda needs on a function's log group to
// write its output (the log group exists: the template declares it).
var lambdaLogActions = []string{"logs:CreateLogStream", "logs:PutLogEvents"}

// knownEnv are the variables internal/config reads.
var knownEnv = config.Variables

// sdkEnv are read by aws-sdk-go-v2 itself, not by our configuration. The
// template declares them (empty) only so that `sam local invoke --env-vars`
// can set them: it overrides nothing the template does not declare.
var sdkEnv = []string{"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SECRETS_MANAGER"}

// Defaults AWS applies when the template leaves a property out.
const (
	defaultFunctionTimeout   = 3      // SAM / Lambda, seconds
	defaultVisibilityTimeout = 30     // SQS, seconds
	defaultRetention         = 345600 // SQS, 4 days in seconds
	defaultBatchingWindow    = 0
)

func TestTemplate(t *testing.T) {
	tpl := loadTemplate(t)
	functions := tpl.ofType("AWS::Serverless::Function")
	if len(functions) == 0 {
		t.Fatalf("got no AWS::Serverless::Function in %s, want at least one", templatePath)
	}
	tables := tpl.ofType("AWS::DynamoDB::Table")
	if !slices.Equal(tables, []string{"IdempotencyTable", "LedgerTable"}) {
		t.Fatalf("got DynamoDB tables %v, want IdempotencyTable and LedgerTable", tables)
	}
	table := "IdempotencyTable"
	apiFn, queueFn := tpl.split(t)

	t.Run("queue visibility covers 6x timeout plus batching window", func(t *testing.T) {
		events := tpl.sqsEvents(t)
		if len(events) == 0 {
			t.Fatal("got no SQS events, want at least one")
		}
		for _, ev := range events {
			timeout := tpl.functionInt(t, ev.function, "Timeout", defaultFunctionTimeout)
			window := intOr(t, get(ev.props, "MaximumBatchingWindowInSeconds"), defaultBatchingWindow)
			visibility := intOr(t, get(tpl.props(ev.queue), "VisibilityTimeout"), defaultVisibilityTimeout)
			if want := 6*timeout + window; visibility < want {
				t.Errorf("%s: %s VisibilityTimeout got %d, want >= 6 x Timeout %d + MaximumBatchingWindowInSeconds %d = %d",
					ev, ev.queue, visibility, timeout, window, want)
			}
		}
	})

	t.Run("SQS events report batch item failures", func(t *testing.T) {
		for _, ev := range tpl.sqsEvents(t) {
			got := scalars(get(ev.props, "FunctionResponseTypes"))
			if !slices.Contains(got, "ReportBatchItemFailures") {
				t.Errorf("%s: FunctionResponseTypes got %q, want it to contain ReportBatchItemFailures", ev, got)
			}
		}
	})

	t.Run("table key and TTL match the table contract (dynamostore)", func(t *testing.T) {
		p := tpl.props(table)
		if got, want := str(get(p, "BillingMode")), "PAY_PER_REQUEST"; got != want {
			t.Errorf("BillingMode got %q, want %q", got, want)
		}
		var hash []string
		for _, k := range items(get(p, "KeySchema")) {
			hash = append(hash, str(get(k, "AttributeName"))+" "+str(get(k, "KeyType")))
		}
		if diff := cmp.Diff([]string{dynamostore.KeyAttribute + " HASH"}, hash); diff != "" {
			t.Errorf("KeySchema (-want +got):\n%s", diff)
		}
		types := map[string]string{}
		for _, d := range items(get(p, "AttributeDefinitions")) {
			types[str(get(d, "AttributeName"))] = str(get(d, "AttributeType"))
		}
		if got, want := types[dynamostore.KeyAttribute], "S"; got != want {
			t.Errorf("AttributeType of %q got %q, want %q", dynamostore.KeyAttribute, got, want)
		}
		if got, want := str(get(p, "TimeToLiveSpecification", "AttributeName")), dynamostore.TTLAttribute; got != want {
			t.Errorf("TTL AttributeName got %q, want %q (dynamostore.TTLAttribute)", got, want)
		}
		for _, path := range [][]string{
			{"TimeToLiveSpecification", "Enabled"},
			{"PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled"},
			{"SSESpecification", "SSEEnabled"},
		} {
			if got := str(get(p, path...)); got != "true" {
				t.Errorf("%s got %q, want true", strings.Join(path, "."), got)
			}
		}
	})

	t.Run("the triage index is the one ddbstore queries", func(t *testing.T) {
		p := tpl.props(table)
		types := map[string]string{}
		for _, d := range items(get(p, "AttributeDefinitions")) {
			types[str(get(d, "AttributeName"))] = str(get(d, "AttributeType"))
		}
		var found bool
		for _, gsi := range items(get(p, "GlobalSecondaryIndexes")) {
			if str(get(gsi, "IndexName")) != ddbstore.IndexTriage {
				continue
			}
			found = true
			var keys []string
			for _, k := range items(get(gsi, "KeySchema")) {
				keys = append(keys, str(get(k, "AttributeName"))+" "+str(get(k, "KeyType"))+" "+types[str(get(k, "AttributeName"))])
			}
			want := []string{ddbstore.AttrTriage + " HASH S", ddbstore.AttrTriageSK + " RANGE S"}
			if diff := cmp.Diff(want, keys); diff != "" {
				t.Errorf("index %s KeySchema with types (-want +got):\n%s", ddbstore.IndexTriage, diff)
			}
			if got := str(get(gsi, "Projection", "ProjectionType")); got != "ALL" {
				t.Errorf("index %s ProjectionType got %q, want ALL (listings show every field without a read per item)", ddbstore.IndexTriage, got)
			}
		}
		if !found {
			t.Errorf("got no GlobalSecondaryIndexes entry %q on %s, want the triage index oncelyctl queries", ddbstore.IndexTriage, table)
		}
	})

	t.Run("the function's writes index exactly failures and poison notes", func(t *testing.T) {
		checkIndexedWrites(t, tpl, table)
	})

	t.Run("the functions' roles cannot read the index, scan or delete", func(t *testing.T) {
		for _, fn := range functions {
			for _, st := range tpl.roleStatements(t, fn) {
				for _, action := range scalars(get(st, "Action")) {
					if slices.Contains(ddbstore.AdminIAMActions(), action) && !slices.Contains(dynamostore.RequiredIAMActions(), action) {
						t.Errorf("%s: Action %s is an operator's (oncelyctl runs with the operator's credentials), want the function's role without it", fn, action)
					}
				}
			}
		}
	})

	// Each function has a role of its own, declared in the template, so
	// that SAM attaches nothing (its AWSLambdaSQSQueueExecutionRole grants
	// receive and delete on every queue in the account) and every grant is
	// here to check. This replaces the check that refused a Role and read
	// the function's Policies: Policies would now be ignored by SAM.
	t.Run("IAM grants exactly the actions the code calls, on its resources only", func(t *testing.T) {
		for _, inbound := range []string{"off", "on"} {
			params := map[string]string{"InboundWebhooks": inbound}
			t.Run("InboundWebhooks="+inbound, func(t *testing.T) { checkIAM(t, tpl, functions, table, params) })
		}
	})

	t.Run("alarms on the function's metrics use the EMF dimension set", func(t *testing.T) {
		// Every metric an alarm watches outside AWS's namespaces is the
		// function's: a name it writes, with exactly its dimension set, or the
		// alarm watches a metric nobody writes and never fires.
		watched := map[string]bool{} // MetricName + " " + Source
		for _, alarm := range tpl.ofType("AWS::CloudWatch::Alarm") {
			p := tpl.props(alarm)
			var stats []*yaml.Node
			if get(p, "MetricName") != nil {
				stats = append(stats, p)
			}
			for _, m := range items(get(p, "Metrics")) {
				if ms := get(m, "MetricStat", "Metric"); ms != nil {
					stats = append(stats, ms)
				}
			}
			for _, m := range stats {
				ns := str(get(m, "Namespace"))
				if strings.HasPrefix(ns, "AWS/") {
					continue
				}
				if ns != router.MetricsNamespace {
					t.Errorf("%s: Namespace got %q, want %q (the function's EMF namespace) or an AWS/ namespace", alarm, ns, router.MetricsNamespace)
					continue
				}
				name := str(get(m, "MetricName"))
				var dims []string
				var source, fn string
				for _, d := range items(get(m, "Dimensions")) {
					dname, value := str(get(d, "Name")), get(d, "Value")
					dims = append(dims, dname)
					switch dname {
					case "Source":
						// Each Source's documents hold their own metrics (the
						// receiving route's outcomes under webhook).
						switch source = str(value); {
						case !slices.Contains(router.Sources, source):
							t.Errorf("%s: Source %q; want one of %q, the values the function writes", alarm, source, router.Sources)
						case !slices.Contains(router.MetricsFor(source), name):
							t.Errorf("%s: MetricName got %q, want one the function writes with Source=%s %q", alarm, name, source, router.MetricsFor(source))
						}
					case "FunctionName":
						if id, ok := ref(value); !ok || !slices.Contains(functions, id) {
							t.Errorf("%s: FunctionName %s; want !Ref of a function", alarm, describe(value))
						} else {
							fn = id
						}
					}
				}
				// Each function writes only its own source: an alarm on the
				// other's would watch a metric nobody writes.
				if want := map[string]string{router.SourceSQS: queueFn, router.SourceHTTP: apiFn, router.SourceWebhook: apiFn}[source]; fn != "" && want != "" && fn != want {
					t.Errorf("%s: Source=%s with FunctionName %s; want %s, the function that serves %s", alarm, source, fn, want, source)
				} else if fn != "" {
					watched[name+" "+source] = true
				}
				slices.Sort(dims)
				if want := slices.Sorted(slices.Values(emf.Dimensions)); !slices.Equal(dims, want) {
					t.Errorf("%s: Dimensions got %q, want exactly the EMF dimension set %q, or the alarm watches a metric nobody writes", alarm, dims, want)
				}
			}
		}
		for _, w := range []struct{ metric, source, why string }{
			{string(idem.LabelRetryExhausted), router.SourceSQS, "those messages are acknowledged and never reach a DLQ"},
			{string(idem.LabelRetryExhausted), router.SourceHTTP, "those requests are answered 422 for good"},
			{string(idem.LabelTransient), router.SourceSQS, "the standard queue's age alarm cannot see an outage's failing messages"},
			{string(idem.LabelPermanent), router.SourceSQS, "a burst of stored permanent failures (a misclassification, a bad deploy) acknowledges its messages: nothing reaches a DLQ"},
			{string(idem.LabelPermanent), router.SourceHTTP, "a burst of stored permanent failures (a misclassification, a bad deploy) is answered 422 for good"},
			{string(idem.LabelStoreRefused), router.SourceSQS, "a missing table or permission fails every message until it is fixed"},
			{string(idem.LabelStoreRefused), router.SourceHTTP, "a missing table or permission fails every request until it is fixed"},
			{router.MetricSigningKeyIgnored, router.SourceSQS, "an invalid pending or previous signing key is ignored, not fatal"},
			{router.MetricSigningKeyIgnored, router.SourceHTTP, "an invalid pending or previous signing key is ignored, not fatal"},
			{router.MetricSecretRefreshFailed, router.SourceSQS, "a failed re-read keeps the old keys, silently but for this"},
			{router.MetricSecretRefreshFailed, router.SourceHTTP, "a failed re-read keeps the old keys, silently but for this"},
			{string(receiving.WebhookQueueFailed), router.SourceWebhook, "GitHub does not retry a delivery answered 5xx"},
			{router.MetricSecretRefreshFailed, router.SourceWebhook, "a failed re-read of the sources keeps the old ones, silently but for this"},
		} {
			if !watched[w.metric+" "+w.source] {
				t.Errorf("got no alarm on %s %s with Source=%s, want one (%s)", router.MetricsNamespace, w.metric, w.source, w.why)
			}
		}
	})

	t.Run("source queues have an age alarm", func(t *testing.T) {
		watched := map[string]bool{}
		for _, alarm := range tpl.ofType("AWS::CloudWatch::Alarm") {
			p := tpl.props(alarm)
			if str(get(p, "MetricName")) != "ApproximateAgeOfOldestMessage" {
				continue
			}
			for _, d := range items(get(p, "Dimensions")) {
				if id, attr, ok := getAtt(get(d, "Value")); ok && attr == "QueueName" {
					watched[id] = true
				}
			}
		}
		for _, ev := range tpl.sqsEvents(t) {
			if !watched[ev.queue] {
				t.Errorf("%s: queue %s has no ApproximateAgeOfOldestMessage alarm, want one (backoff hides a growing backlog)", ev, ev.queue)
			}
		}
	})

	t.Run("retention outlives every copy of a message", func(t *testing.T) {
		param := get(tpl.root, "Parameters", "IdempotencyTtlHours")
		minHours := intOr(t, get(param, "MinValue"), 0)
		defHours := intOr(t, get(param, "Default"), 0)
		for _, fn := range functions {
			ttl := tpl.env(fn)["IDEMPOTENCY_TTL"]
			if ttl == nil || ttl.Tag != "!Sub" || ttl.Value != "${IdempotencyTtlHours}h" {
				t.Errorf("%s: IDEMPOTENCY_TTL got %s, want !Sub \"${IdempotencyTtlHours}h\" (so the parameter's MinValue holds)", fn, describe(ttl))
			}
		}
		// The longest a copy of a message lives, from its first enqueue: a
		// standard queue's message keeps its enqueue time in the DLQ, so
		// max(source, DLQ); a FIFO queue's restarts it there, so source +
		// DLQ. Every copy must find its record.
		for _, ev := range tpl.sqsEvents(t) {
			q := tpl.props(ev.queue)
			src := intOr(t, get(q, "MessageRetentionPeriod"), defaultRetention)
			age, how := src, "the source's retention"
			if dlq, _, ok := getAtt(get(q, "RedrivePolicy", "deadLetterTargetArn")); ok && tpl.resources[dlq] != nil {
				dst := intOr(t, get(tpl.props(dlq), "MessageRetentionPeriod"), defaultRetention)
				if str(get(q, "FifoQueue")) == "true" {
					age, how = src+dst, "FIFO: source + DLQ retention, the DLQ restarts the clock"
				} else {
					age, how = max(src, dst), "standard: max(source, DLQ) retention, the DLQ keeps the enqueue time"
				}
			}
			for _, c := range []struct {
				what  string
				hours int
			}{{"MinValue", minHours}, {"Default", defHours}} {
				if c.hours*3600 < age {
					t.Errorf("%s: IdempotencyTtlHours %s got %d h, want >= %d h, the longest a copy of a message lives (%s): an older copy would run again",
						ev.queue, c.what, c.hours, (age+3599)/3600, how)
				}
			}
		}
	})

	t.Run("every route is authorized unless the opt-out parameter says otherwise", func(t *testing.T) {
		routes := tpl.ofType("AWS::ApiGatewayV2::Route")
		if len(routes) == 0 {
			t.Fatal("got no AWS::ApiGatewayV2::Route, want POST /events declared as one")
		}
		for _, fn := range functions {
			for name, ev := range pairs(get(tpl.props(fn), "Events")) {
				if typ := str(get(ev, "Type")); typ == "HttpApi" || typ == "Api" {
					t.Errorf("%s.Events.%s: got a %s event, want routes as AWS::ApiGatewayV2::Route (SAM ignores intrinsics in an event's Auth)", fn, name, typ)
				}
			}
		}
		if apis := tpl.ofType("AWS::Serverless::HttpApi"); len(apis) > 0 {
			t.Errorf("got %v, want no AWS::Serverless::HttpApi (its routes would bypass this check)", apis)
		}
		for _, r := range routes {
			p := tpl.props(r)
			if why, ok := unauthenticatedRoutes[str(get(p, "RouteKey"))]; ok {
				if auth := str(get(p, "AuthorizationType")); auth != "NONE" {
					t.Errorf("%s: AuthorizationType %s; want NONE, as listed (%s)", r, auth, why)
				}
				continue
			}
			for _, mode := range []string{"AWS_IAM", "JWT", "NONE"} {
				for _, scopes := range []string{"", "oncely/events.write,oncely/admin"} {
					params := map[string]string{"ApiAuth": mode, "JwtScopes": scopes}
					auth := tpl.resolve(get(p, "AuthorizationType"), params)
					authorizer := tpl.resolve(get(p, "AuthorizerId"), params)
					gotScopes := tpl.resolve(get(p, "AuthorizationScopes"), params)
					switch {
					case mode == "NONE" && auth != "NONE":
						t.Errorf("%s with ApiAuth=NONE: AuthorizationType %q; want NONE (the documented opt-out)", r, auth)
					case mode != "NONE" && auth != mode:
						t.Errorf("%s with ApiAuth=%s: AuthorizationType %q; want %s", r, mode, auth, mode)
					case mode == "JWT" && str(get(tpl.resources[authorizer], "Type")) != "AWS::ApiGatewayV2::Authorizer":
						t.Errorf("%s with ApiAuth=JWT: AuthorizerId resolves to %q; want the JWT authorizer", r, authorizer)
					case mode != "JWT" && authorizer != "":
						t.Errorf("%s with ApiAuth=%s: AuthorizerId %q; want none", r, mode, authorizer)
					case mode == "JWT" && gotScopes != scopes:
						// Scopes apply to JWT authorizers only (API Gateway
						// refuses them on other routes).
						t.Errorf("%s with ApiAuth=JWT, JwtScopes=%q: AuthorizationScopes %q; want JwtScopes", r, scopes, gotScopes)
					case mode != "JWT" && gotScopes != "":
						t.Errorf("%s with ApiAuth=%s: AuthorizationScopes %q; want none", r, mode, gotScopes)
					}
				}
			}
		}
		param := get(tpl.root, "Parameters", "ApiAuth")
		if def := str(get(param, "Default")); def != "AWS_IAM" {
			t.Errorf("ApiAuth Default %q; want AWS_IAM: authorized by default", def)
		}
		if got := scalars(get(param, "AllowedValues")); !slices.Equal(got, []string{"AWS_IAM", "JWT", "NONE"}) {
			t.Errorf("ApiAuth AllowedValues %q; want [AWS_IAM JWT NONE]", got)
		}
	})

	t.Run("the API is throttled", func(t *testing.T) {
		stages := tpl.ofType("AWS::ApiGatewayV2::Stage")
		if len(stages) == 0 {
			t.Fatal("got no AWS::ApiGatewayV2::Stage")
		}
		for _, st := range stages {
			for _, k := range []string{"ThrottlingBurstLimit", "ThrottlingRateLimit"} {
				n := get(tpl.props(st), "DefaultRouteSettings", k)
				id, ok := ref(n)
				if !ok || intOr(t, get(tpl.root, "Parameters", id, "Default"), 0) <= 0 {
					t.Errorf("%s: DefaultRouteSettings.%s got %s, want !Ref a parameter with a positive default", st, k, describe(n))
				}
			}
		}
	})

	t.Run("deliveries are signed with a generated secret that is kept", func(t *testing.T) {
		// The inbound sources' secret, created only with InboundWebhooks=on,
		// has checks of its own (inbound_test.go).
		var secrets []string
		for _, id := range tpl.ofType("AWS::SecretsManager::Secret") {
			if get(tpl.resources[id], "Condition") == nil {
				secrets = append(secrets, id)
			}
		}
		if !slices.Equal(secrets, []string{"DownstreamUrlSecret", "WebhookSecret"}) {
			t.Fatalf("got unconditional secrets %v, want DownstreamUrlSecret and WebhookSecret", secrets)
		}
		g := get(tpl.props("WebhookSecret"), "GenerateSecretString")
		// 32 characters of [A-Za-z0-9] are valid base64: a 24-byte key, the
		// Standard Webhooks minimum. Exactly this: a change of
		// GenerateSecretString generates a new value on a stack update.
		if want := "ExcludePunctuation: true PasswordLength: 32"; describe(sortedMapping(g)) != want {
			t.Errorf("WebhookSecret: GenerateSecretString %s; want exactly %s (changing it regenerates the key, and every receiver refuses)", describe(g), want)
		}
		// A replacement or a stack deletion would lose the key receivers hold.
		for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if got := str(get(tpl.resources["WebhookSecret"], k)); got != "Retain" {
				t.Errorf("WebhookSecret: %s %q; want Retain", k, got)
			}
		}
		for _, fn := range functions {
			vars := tpl.env(fn)
			if id, ok := ref(vars[config.EnvWebhookSecret]); !ok || id != "WebhookSecret" {
				t.Errorf("%s: %s got %s, want !Ref WebhookSecret", fn, config.EnvWebhookSecret, describe(vars[config.EnvWebhookSecret]))
			}
			if def := str(get(tpl.root, "Parameters", "WebhookSigning", "Default")); def != "on" {
				t.Errorf("WebhookSigning Default %q; want on", def)
			}
		}
	})

	t.Run("retired variables are not set", func(t *testing.T) {
		for _, fn := range functions {
			for name := range pairs(get(tpl.props(fn), "Environment", "Variables")) {
				if _, retired := config.Retired[name]; retired {
					t.Errorf("%s: Environment sets %s, which fails init: %s", fn, name, config.Retired[name])
				}
			}
		}
	})

	t.Run("redrive after at least 5 receives into a DLQ that outlives its source", func(t *testing.T) {
		for _, ev := range tpl.sqsEvents(t) {
			if get(tpl.props(ev.queue), "RedrivePolicy") == nil {
				t.Errorf("%s: queue %s got no RedrivePolicy, want one with a DLQ", ev, ev.queue)
			}
		}
		for _, q := range tpl.ofType("AWS::SQS::Queue") {
			rp := get(tpl.props(q), "RedrivePolicy")
			if rp == nil {
				continue
			}
			if rp.Kind != yaml.MappingNode {
				t.Errorf("%s: RedrivePolicy got %s, want a mapping", q, describe(rp))
				continue
			}
			if got := intOr(t, get(rp, "maxReceiveCount"), 0); got < 5 {
				t.Errorf("%s: maxReceiveCount got %d, want >= 5", q, got)
			}
			dlq, attr, ok := getAtt(get(rp, "deadLetterTargetArn"))
			if !ok || attr != "Arn" || tpl.resources[dlq] == nil {
				t.Errorf("%s: deadLetterTargetArn got %s, want !GetAtt <queue in this template>.Arn", q, describe(get(rp, "deadLetterTargetArn")))
				continue
			}
			src := intOr(t, get(tpl.props(q), "MessageRetentionPeriod"), defaultRetention)
			dst := intOr(t, get(tpl.props(dlq), "MessageRetentionPeriod"), defaultRetention)
			if dst <= src {
				t.Errorf("%s: DLQ %s MessageRetentionPeriod got %d, want > the source's %d (a message keeps its enqueue time in the DLQ)", q, dlq, dst, src)
			}
		}
	})

	t.Run("functions build with the makefile for provided.al2023 arm64", func(t *testing.T) {
		mk, err := os.ReadFile(makefilePath)
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range functions {
			p := tpl.props(fn)
			for _, c := range []struct{ got, want, what string }{
				{tpl.functionStr(fn, "Runtime"), "provided.al2023", "Runtime"},
				{tpl.functionStr(fn, "Handler"), "bootstrap", "Handler"},
				{str(get(tpl.resources[fn], "Metadata", "BuildMethod")), "makefile", "Metadata.BuildMethod"},
			} {
				if c.got != c.want {
					t.Errorf("%s: %s got %q, want %q", fn, c.what, c.got, c.want)
				}
			}
			arch := get(p, "Architectures")
			if arch == nil {
				arch = get(tpl.root, "Globals", "Function", "Architectures")
			}
			if got := scalars(arch); !slices.Equal(got, []string{"arm64"}) {
				t.Errorf("%s: Architectures got %q, want [arm64]", fn, got)
			}
			// One recipe may build several functions (the same bootstrap):
			// "build-A build-B:".
			target := regexp.MustCompile(`(?m)^(build-\S+ )*build-` + regexp.QuoteMeta(fn) + `( build-\S+)*:`)
			if !target.Match(mk) {
				t.Errorf("%s: got no build-%s: target in %s, want one (sam build runs it)", fn, fn, makefilePath)
			}
		}
	})

	t.Run("environment holds only variables the code reads", func(t *testing.T) {
		for _, fn := range functions {
			vars := tpl.env(fn)
			for name := range vars {
				if !slices.Contains(knownEnv, name) && !slices.Contains(sdkEnv, name) {
					t.Errorf("%s: Environment got %s, want only variables internal/config reads %q (or the SDK's %q)", fn, name, knownEnv, sdkEnv)
				}
			}
			if id, ok := ref(vars["IDEMPOTENCY_TABLE"]); !ok || id != table {
				t.Errorf("%s: IDEMPOTENCY_TABLE got %s, want !Ref %s", fn, describe(vars["IDEMPOTENCY_TABLE"]), table)
			}
			if id, ok := ref(vars[config.EnvLedgerTable]); !ok || id != "LedgerTable" {
				t.Errorf("%s: %s got %s, want !Ref LedgerTable", fn, config.EnvLedgerTable, describe(vars[config.EnvLedgerTable]))
			}
			// The URL is a credential: the environment (readable with
			// ReadOnlyAccess) names its secret and never holds it.
			// DOWNSTREAM_URL is declared empty, for sam local to set.
			secret, ok := ref(vars[config.EnvDownstreamURLSecret])
			if !ok || str(get(tpl.resources[secret], "Type")) != "AWS::SecretsManager::Secret" {
				t.Errorf("%s: %s got %s, want !Ref the secret holding the URL", fn, config.EnvDownstreamURLSecret, describe(vars[config.EnvDownstreamURLSecret]))
			} else if id, ok := ref(get(tpl.props(secret), "SecretString")); !ok || id != "DownstreamUrl" {
				t.Errorf("%s: SecretString %s; want !Ref DownstreamUrl", secret, describe(get(tpl.props(secret), "SecretString")))
			}
			if v := vars[config.EnvDownstreamURL]; v == nil || v.Kind != yaml.ScalarNode || isIntrinsic(v) || v.Value != "" {
				t.Errorf("%s: %s got %s, want \"\" (the URL is read from its secret; sam local sets this one)", fn, config.EnvDownstreamURL, describe(v))
			}
		}
	})

	t.Run("env.json sets only variables the template declares", func(t *testing.T) {
		// sam local invoke --env-vars overrides declared variables only: any
		// other entry is silently ignored (the region and credentials too,
		// which sam local sets itself).
		data, err := os.ReadFile(envVarsPath)
		if err != nil {
			t.Fatal(err)
		}
		var env map[string]map[string]string
		if err := json.Unmarshal(data, &env); err != nil {
			t.Fatalf("parse %s: %v", envVarsPath, err)
		}
		for fn, vars := range env {
			// "Parameters" applies to every function that declares a
			// variable: each must be declared by at least one.
			targets := []string{fn}
			if fn == "Parameters" {
				targets = functions
			} else if !slices.Contains(functions, fn) {
				t.Errorf("%s: got function %s, want Parameters or one of %q", envVarsPath, fn, functions)
				continue
			}
			for name := range vars {
				if !slices.ContainsFunc(targets, func(f string) bool { return tpl.env(f)[name] != nil }) {
					t.Errorf("%s: %s.%s is not declared in the template's Environment of %v, want it declared or removed (sam local ignores it)", envVarsPath, fn, name, targets)
				}
			}
		}
	})
}

func TestSampleEvents(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(eventsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("got no sample events in %s, want some", eventsDir)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.HasPrefix(name, "sqs-"):
				var ev events.SQSEvent
				decodeStrict(t, data, &ev)
				checkSQSEvent(t, name, ev)
			case strings.HasPrefix(name, "api-"):
				var req events.APIGatewayV2HTTPRequest
				decodeStrict(t, data, &req)
				if got, want := req.RequestContext.HTTP.Method+" "+req.RawPath, "POST /events"; got != want {
					t.Errorf("method and path got %q, want %q (the route in template.yaml)", got, want)
				}
				if req.Headers["idempotency-key"] == "" {
					t.Error("idempotency-key header got empty, want a key (HTTP API lower-cases header names)")
				}
			default:
				t.Errorf("got %s, want a name starting sqs- or api- so that this test knows its shape", name)
			}
		})
	}
}

func checkSQSEvent(t *testing.T, name string, ev events.SQSEvent) {
	t.Helper()
	if len(ev.Records) == 0 {
		t.Fatal("got no Records, want at least one")
	}
	seen := map[string]bool{}
	for i, r := range ev.Records {
		if r.MessageId == "" {
			t.Errorf("Records[%d].messageId got empty, want an id (an empty itemIdentifier fails the whole batch)", i)
		}
		if seen[r.MessageId] {
			t.Errorf("Records[%d].messageId got %q twice, want unique ids", i, r.MessageId)
		}
		seen[r.MessageId] = true
		if r.EventSource != "aws:sqs" {
			t.Errorf("Records[%d].eventSource got %q, want aws:sqs", i, r.EventSource)
		}
		if fifo := strings.HasSuffix(r.EventSourceARN, ".fifo"); fifo != strings.Contains(name, "fifo") {
			t.Errorf("Records[%d].eventSourceARN got %q, want a .fifo ARN exactly in FIFO samples", i, r.EventSourceARN)
		}
		if strings.Contains(name, "fifo") && r.Attributes["MessageGroupId"] == "" {
			t.Errorf("Records[%d] got no MessageGroupId attribute, want one in a FIFO sample", i)
		}
	}
}

func decodeStrict(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode into %T: %v", v, err)
	}
}

// checkIAM checks that each function's role grants exactly the actions the
// code calls, on its resources only, for the given parameter values: a
// statement under !If counts only when its condition holds, and so does a
// resource with a Condition.
func checkIAM(t *testing.T, tpl template, functions []string, table string, params map[string]string) {
	t.Helper()
	roles := map[string]string{}
	for _, fn := range functions {
		p := tpl.props(fn)
		if get(p, "Policies") != nil || get(tpl.root, "Globals", "Function", "Policies") != nil {
			t.Errorf("%s: got Policies, want none (SAM ignores them beside a Role; grants go in the role)", fn)
		}
		// Each resource, and exactly the actions its driver lists.
		want := map[string][]string{table: dynamostore.RequiredIAMActions(), "LedgerTable": ledger.RequiredIAMActions()}
		// The secrets its environment names (the inbound sources' only on
		// the API function, and only when the route is on).
		for _, secret := range tpl.ofType("AWS::SecretsManager::Secret") {
			for _, v := range tpl.env(fn) {
				if tpl.exists(secret, params) && tpl.resolve(v, params) == secret {
					want[secret] = secretsource.RequiredIAMActions()
				}
			}
		}
		for _, ev := range tpl.sqsEvents(t) {
			if ev.function == fn {
				want[ev.queue] = append(slices.Clone(eventSourceMappingActions), sqsvisibility.RequiredIAMActions()...)
			}
		}
		if lg, ok := ref(get(p, "LoggingConfig", "LogGroup")); ok {
			want[lg] = lambdaLogActions
		}
		// With inbound webhooks on, the function that reads
		// INBOUND_QUEUE_URL sends each verified delivery there.
		if q, ok := ref(tpl.env(fn)[config.EnvInboundQueueURL]); ok && params["InboundWebhooks"] == "on" {
			want[q] = append(slices.Clone(want[q]), sqssend.RequiredIAMActions()...)
		}
		for id := range want {
			want[id] = slices.Sorted(slices.Values(want[id]))
		}
		role, attr, ok := getAtt(get(p, "Role"))
		if !ok || attr != "Arn" || str(get(tpl.resources[role], "Type")) != "AWS::IAM::Role" {
			t.Errorf("%s: Role got %s, want !GetAtt <an AWS::IAM::Role of this template>.Arn", fn, describe(get(p, "Role")))
			continue
		}
		if other, shared := roles[role]; shared {
			t.Errorf("%s and %s share the role %s, want one each (each gets its own resources)", other, fn, role)
		}
		roles[role] = fn
		rp := tpl.props(role)
		for _, k := range []string{"ManagedPolicyArns", "PermissionsBoundary"} {
			if get(rp, k) != nil {
				t.Errorf("%s: got %s, want inline policies only, so that every grant is checked here", role, k)
			}
		}
		trust := items(get(rp, "AssumeRolePolicyDocument", "Statement"))
		if len(trust) != 1 || str(get(trust[0], "Principal", "Service")) != "lambda.amazonaws.com" || str(get(trust[0], "Action")) != "sts:AssumeRole" {
			t.Errorf("%s: AssumeRolePolicyDocument %s, want lambda.amazonaws.com alone to assume it", role, describe(get(rp, "AssumeRolePolicyDocument")))
		}
		got := map[string][]string{}
		for i, st := range tpl.statements(tpl.roleStatements(t, fn), params) {
			where := role + ": Statement[" + strconv.Itoa(i) + "]"
			if effect := str(get(st, "Effect")); effect != "Allow" {
				t.Errorf("%s: Effect got %q, want Allow", where, effect)
			}
			for _, k := range []string{"NotAction", "NotResource", "Condition"} {
				if get(st, k) != nil {
					t.Errorf("%s: got %s, want Action and Resource only", where, k)
				}
			}
			actions := scalars(get(st, "Action"))
			for _, action := range actions {
				if strings.Contains(action, "*") {
					t.Errorf("%s: Action got %q, want no wildcard", where, action)
				}
			}
			for _, res := range items(get(st, "Resource")) {
				id, ok := resourceID(res)
				if !ok || want[id] == nil {
					t.Errorf("%s: Resource got %s, want !GetAtt <X>.Arn or !Ref <X> for one of %v", where, describe(res), slices.Sorted(maps.Keys(want)))
					continue
				}
				got[id] = append(got[id], actions...)
			}
		}
		for id := range got {
			slices.Sort(got[id])
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (%s): IAM actions by resource (-want +got):\n%s", fn, role, diff)
		}
	}
}

// exists reports whether resource id is created for these parameter values.
func (tpl template) exists(id string, params map[string]string) bool {
	c := get(tpl.resources[id], "Condition")
	return c == nil || tpl.condition(str(c), params)
}

// statements returns the statements for these parameter values: !If
// [Condition, statement, !Ref AWS::NoValue] gives the chosen branch, or
// nothing.
func (tpl template) statements(list []*yaml.Node, params map[string]string) []*yaml.Node {
	var out []*yaml.Node
	for _, st := range list {
		if st.Tag == "!If" && st.Kind == yaml.SequenceNode && len(st.Content) == 3 {
			if tpl.condition(st.Content[0].Value, params) {
				st = st.Content[1]
			} else {
				st = st.Content[2]
			}
		}
		if id, ok := ref(st); ok && id == "AWS::NoValue" {
			continue
		}
		out = append(out, st)
	}
	return out
}

// template is a parsed SAM template. It reads yaml.Node trees so that the
// CloudFormation short forms (!Ref, !GetAtt, !Sub) survive as tags.
type template struct {
	root      *yaml.Node
	resources map[string]*yaml.Node
}

func loadTemplate(t *testing.T) template {
	t.Helper()
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("parse %s: %v", templatePath, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		t.Fatalf("%s: got %s, want one YAML document", templatePath, describe(&doc))
	}
	tpl := template{root: doc.Content[0], resources: map[string]*yaml.Node{}}
	for id, res := range pairs(get(tpl.root, "Resources")) {
		tpl.resources[id] = res
	}
	return tpl
}

// ofType returns the logical ids of the resources of type typ, sorted.
func (tpl template) ofType(typ string) []string {
	var ids []string
	for id, res := range tpl.resources {
		if str(get(res, "Type")) == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func (tpl template) props(id string) *yaml.Node { return get(tpl.resources[id], "Properties") }

// split returns the API function (the one the API's integrations target)
// and the queue function (the one with the SQS events): two functions from
// the same bootstrap, so that neither's load can take the other's
// concurrency.
func (tpl template) split(t *testing.T) (api, queue string) {
	t.Helper()
	for _, in := range tpl.ofType("AWS::ApiGatewayV2::Integration") {
		id, attr, ok := getAtt(get(tpl.props(in), "IntegrationUri"))
		if !ok || attr != "Arn" || str(get(tpl.resources[id], "Type")) != "AWS::Serverless::Function" {
			t.Fatalf("%s: IntegrationUri %s; want !GetAtt <function>.Arn", in, describe(get(tpl.props(in), "IntegrationUri")))
		}
		if api != "" && api != id {
			t.Fatalf("integrations target %s and %s; want one API function", api, id)
		}
		api = id
	}
	for _, ev := range tpl.sqsEvents(t) {
		if queue != "" && queue != ev.function {
			t.Fatalf("SQS events on %s and %s; want one queue function", queue, ev.function)
		}
		queue = ev.function
	}
	if api == "" || queue == "" || api == queue {
		t.Fatalf("API function %q, queue function %q; want two functions, one serving the API and one the queues", api, queue)
	}
	return api, queue
}

// sortedMapping returns a copy of a mapping node with its keys sorted, for
// comparing a mapping with a description.
func sortedMapping(n *yaml.Node) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return n
	}
	c := *n
	type kv struct{ k, v *yaml.Node }
	var kvs []kv
	for i := 0; i+1 < len(n.Content); i += 2 {
		kvs = append(kvs, kv{n.Content[i], n.Content[i+1]})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.k.Value, b.k.Value) })
	c.Content = nil
	for _, p := range kvs {
		c.Content = append(c.Content, p.k, p.v)
	}
	return &c
}

// roleStatements returns the statements of the inline policies of fn's
// role (its Role's !GetAtt target).
func (tpl template) roleStatements(t *testing.T, fn string) []*yaml.Node {
	t.Helper()
	role, _, ok := getAtt(get(tpl.props(fn), "Role"))
	if !ok {
		return nil
	}
	var out []*yaml.Node
	for i, policy := range items(get(tpl.props(role), "Policies")) {
		doc := get(policy, "PolicyDocument")
		if doc == nil || get(doc, "Statement") == nil {
			t.Errorf("%s: Policies[%d] got %s, want an inline policy document", role, i, describe(policy))
			continue
		}
		out = append(out, items(get(doc, "Statement"))...)
	}
	return out
}

// env returns fn's environment: Globals' variables, then its own.
func (tpl template) env(fn string) map[string]*yaml.Node {
	vars := map[string]*yaml.Node{}
	for _, src := range []*yaml.Node{
		get(tpl.root, "Globals", "Function", "Environment", "Variables"),
		get(tpl.props(fn), "Environment", "Variables"),
	} {
		for k, v := range pairs(src) {
			vars[k] = v
		}
	}
	return vars
}

// functionStr and functionInt read a function property, falling back to
// Globals.Function.
func (tpl template) functionStr(fn, key string) string {
	if n := get(tpl.props(fn), key); n != nil {
		return str(n)
	}
	return str(get(tpl.root, "Globals", "Function", key))
}

func (tpl template) functionInt(t *testing.T, fn, key string, def int) int {
	t.Helper()
	if n := get(tpl.props(fn), key); n != nil {
		return intOr(t, n, def)
	}
	return intOr(t, get(tpl.root, "Globals", "Function", key), def)
}

// sqsEvent is one SQS event source of one function.
type sqsEvent struct {
	function, name, queue string
	props                 *yaml.Node
}

func (ev sqsEvent) String() string { return ev.function + ".Events." + ev.name }

func (tpl template) sqsEvents(t *testing.T) []sqsEvent {
	t.Helper()
	var out []sqsEvent
	for _, fn := range tpl.ofType("AWS::Serverless::Function") {
		for name, ev := range pairs(get(tpl.props(fn), "Events")) {
			if str(get(ev, "Type")) != "SQS" {
				continue
			}
			e := sqsEvent{function: fn, name: name, props: get(ev, "Properties")}
			id, attr, ok := getAtt(get(e.props, "Queue"))
			if !ok || attr != "Arn" || str(get(tpl.resources[id], "Type")) != "AWS::SQS::Queue" {
				t.Errorf("%s: Queue got %s, want !GetAtt <AWS::SQS::Queue in this template>.Arn", e, describe(get(e.props, "Queue")))
				continue
			}
			e.queue = id
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b sqsEvent) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// The template walkers are samtemplate's.
var (
	get         = samtemplate.Get
	pairs       = samtemplate.Pairs
	items       = samtemplate.Items
	isIntrinsic = samtemplate.IsIntrinsic
	getAtt      = samtemplate.GetAtt
)

// scalars returns the literal string values of items(n); an intrinsic
// function shows as its description, so that it never matches by accident.
func scalars(n *yaml.Node) []string {
	var out []string
	for _, it := range items(n) {
		out = append(out, str(it))
	}
	return out
}

func str(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	if n.Kind != yaml.ScalarNode || isIntrinsic(n) {
		return describe(n)
	}
	return n.Value
}

// intOr returns n as an integer, def when n is absent. A value that is not a
// literal integer (a !Ref, say) fails the test: these checks need numbers.
func intOr(t *testing.T, n *yaml.Node, def int) int {
	t.Helper()
	if n == nil {
		return def
	}
	v, err := strconv.Atoi(str(n))
	if err != nil {
		t.Errorf("line %d: got %s, want a literal integer so that it can be checked", n.Line, describe(n))
		return def
	}
	return v
}

// resolve evaluates n for the given parameter values: a literal, !Ref of a
// parameter (its value in params, else its Default) or of a resource (its
// id), !If over a condition, or !Join of a list. A CommaDelimitedList is
// its comma-separated text. AWS::NoValue resolves to "".
func (tpl template) resolve(n *yaml.Node, params map[string]string) string {
	if n == nil {
		return ""
	}
	if id, ok := ref(n); ok {
		if id == "AWS::NoValue" {
			return ""
		}
		if v, ok := params[id]; ok {
			return v
		}
		if p := get(tpl.root, "Parameters", id); p != nil {
			return str(get(p, "Default"))
		}
		return id
	}
	switch {
	case n.Tag == "!If" && n.Kind == yaml.SequenceNode && len(n.Content) == 3:
		if tpl.condition(n.Content[0].Value, params) {
			return tpl.resolve(n.Content[1], params)
		}
		return tpl.resolve(n.Content[2], params)
	case n.Tag == "!Join" && n.Kind == yaml.SequenceNode && len(n.Content) == 2:
		var parts []string
		if n.Content[1].Kind == yaml.SequenceNode && !isIntrinsic(n.Content[1]) {
			for _, it := range n.Content[1].Content {
				parts = append(parts, tpl.resolve(it, params))
			}
		} else if v := tpl.resolve(n.Content[1], params); v != "" {
			parts = strings.Split(v, ",")
		}
		return strings.Join(parts, n.Content[0].Value)
	case n.Kind == yaml.SequenceNode && !isIntrinsic(n):
		var parts []string
		for _, it := range n.Content {
			parts = append(parts, tpl.resolve(it, params))
		}
		return strings.Join(parts, ",")
	}
	return str(n)
}

func (tpl template) condition(name string, params map[string]string) bool {
	return tpl.holds(get(tpl.root, "Conditions", name), params)
}

// holds evaluates a condition function: !Equals, !Not, !And, !Or and
// !Condition. Anything else is false.
func (tpl template) holds(c *yaml.Node, params map[string]string) bool {
	if c == nil {
		return false
	}
	switch c.Tag {
	case "!Equals":
		return len(c.Content) == 2 && tpl.resolve(c.Content[0], params) == tpl.resolve(c.Content[1], params)
	case "!Not":
		return len(c.Content) == 1 && !tpl.holds(c.Content[0], params)
	case "!And", "!Or":
		and := c.Tag == "!And"
		for _, it := range c.Content {
			if tpl.holds(it, params) != and {
				return !and
			}
		}
		return and
	case "!Condition":
		return tpl.condition(c.Value, params)
	}
	return false
}

// rulesRefuse returns the descriptions of the template's Rules that refuse
// params (a CloudFormation Rule refuses when its RuleCondition holds and
// an Assert does not).
func (tpl template) rulesRefuse(params map[string]string) []string {
	var out []string
	for name, rule := range pairs(get(tpl.root, "Rules")) {
		if rc := get(rule, "RuleCondition"); rc != nil && !tpl.holds(rc, params) {
			continue
		}
		for _, a := range items(get(rule, "Assertions")) {
			if !tpl.holds(get(a, "Assert"), params) {
				out = append(out, name+": "+str(get(a, "AssertDescription")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// resourceID returns X for !GetAtt X.Arn or !Ref X.
func resourceID(n *yaml.Node) (string, bool) {
	if id, attr, ok := getAtt(n); ok && attr == "Arn" {
		return id, true
	}
	return ref(n)
}

// ref returns X for !Ref X or {Ref: X}.
func ref(n *yaml.Node) (string, bool) {
	switch {
	case n == nil:
		return "", false
	case n.Tag == "!Ref" && n.Kind == yaml.ScalarNode:
		return n.Value, true
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "Ref":
		return n.Content[1].Value, true
	}
	return "", false
}

// describe renders a node for failure messages.
func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	out, err := yaml.Marshal(n)
	if err != nil {
		return "line " + strconv.Itoa(n.Line)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

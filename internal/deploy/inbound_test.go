package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/eventsapi"
	"github.com/oncely/oncely/internal/receiving"
)

// The invariants of the receiving route POST /webhooks/{source}
// (InboundWebhooks), served by the API function. Its IAM grants are checked
// with every other grant (checkIAM, for both values of the parameter), its
// alarms with the other alarms, its exemption from ApiAuth by
// unauthenticatedRoutes.
func TestInboundWebhooksTemplate(t *testing.T) {
	tpl := loadTemplate(t)
	functions := tpl.ofType("AWS::Serverless::Function")
	apiFn, queueFn := tpl.split(t)
	off, on := map[string]string{"InboundWebhooks": "off"}, map[string]string{"InboundWebhooks": "on"}

	t.Run("off by default, and the function reads the parameter", func(t *testing.T) {
		param := get(tpl.root, "Parameters", "InboundWebhooks")
		if def := str(get(param, "Default")); def != "off" {
			t.Errorf("InboundWebhooks Default %q; want off: a route without an authorizer is opted into", def)
		}
		if got := scalars(get(param, "AllowedValues")); !slices.Equal(got, []string{"on", "off"}) {
			t.Errorf("InboundWebhooks AllowedValues %q; want [on off]", got)
		}
		for _, fn := range functions {
			v := tpl.env(fn)[config.EnvInboundWebhooks]
			if id, ok := ref(v); fn == apiFn && (!ok || id != "InboundWebhooks") {
				t.Errorf("%s: %s got %s, want !Ref InboundWebhooks (the API function serves the route)", fn, config.EnvInboundWebhooks, describe(v))
			}
			if fn != apiFn && v != nil {
				t.Errorf("%s: %s is set; want it on the API function only (the queue function recognises envelopes without it)", fn, config.EnvInboundWebhooks)
			}
		}
	})

	t.Run("the receiving route is the one without an authorizer", func(t *testing.T) {
		if _, listed := unauthenticatedRoutes[receiving.WebhookRouteKey]; !listed || len(unauthenticatedRoutes) != 1 {
			t.Errorf("unauthenticatedRoutes %v; want exactly %s", unauthenticatedRoutes, receiving.WebhookRouteKey)
		}
		var hooks, events []string
		for _, r := range tpl.ofType("AWS::ApiGatewayV2::Route") {
			switch str(get(tpl.props(r), "RouteKey")) {
			case receiving.WebhookRouteKey:
				hooks = append(hooks, r)
			case eventsapi.RouteKey:
				events = append(events, r)
			}
		}
		if len(hooks) != 1 || len(events) != 1 {
			t.Fatalf("routes %q for %s and %q for %s; want one of each", hooks, receiving.WebhookRouteKey, events, eventsapi.RouteKey)
		}
		hook, p := hooks[0], tpl.props(hooks[0])
		for _, mode := range []string{"AWS_IAM", "JWT", "NONE"} {
			params := map[string]string{"ApiAuth": mode, "InboundWebhooks": "on"}
			// Senders cannot sign SigV4 or fetch a JWT: the function checks
			// their signature instead, whatever ApiAuth says.
			if auth := tpl.resolve(get(p, "AuthorizationType"), params); auth != "NONE" {
				t.Errorf("%s with ApiAuth=%s: AuthorizationType %q; want NONE", hook, mode, auth)
			}
			if a := tpl.resolve(get(p, "AuthorizerId"), params); a != "" {
				t.Errorf("%s with ApiAuth=%s: AuthorizerId %q; want none", hook, mode, a)
			}
		}
		if tpl.exists(hook, off) || !tpl.exists(hook, on) {
			t.Errorf("%s: Condition %s; want the route created exactly when InboundWebhooks=on", hook, describe(get(tpl.resources[hook], "Condition")))
		}
		// The same integration as POST /events: the API function verifies.
		if got, want := describe(get(p, "Target")), describe(get(tpl.props(events[0]), "Target")); got != want {
			t.Errorf("%s: Target %s; want %s's, %s", hook, got, events[0], want)
		}
	})

	t.Run("the route needs no NONE acknowledgement", func(t *testing.T) {
		// Its callers are not anonymous: each delivery is signed by a sender
		// the operator listed, so the rule that guards ApiAuth=NONE does not
		// apply to it.
		for _, params := range []map[string]string{
			{"InboundWebhooks": "on"},
			{"InboundWebhooks": "on", "ApiAuth": "JWT", "JwtIssuer": "https://issuer.example", "JwtAudience": "client-1"},
		} {
			if got := tpl.rulesRefuse(params); len(got) > 0 {
				t.Errorf("with %v the rules refuse %q; want the route accepted", params, got)
			}
		}
	})

	t.Run("every route has an invoke permission", func(t *testing.T) {
		for _, r := range tpl.ofType("AWS::ApiGatewayV2::Route") {
			p := tpl.props(r)
			api, _ := ref(get(p, "ApiId"))
			method, path, _ := strings.Cut(str(get(p, "RouteKey")), " ")
			want := "${" + api + "}/*/" + method + regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(path, "*")
			var found []string
			for _, perm := range tpl.ofType("AWS::Lambda::Permission") {
				pp := tpl.props(perm)
				arn := get(pp, "SourceArn")
				if arn == nil || arn.Tag != "!Sub" || !strings.HasSuffix(arn.Value, want) {
					continue
				}
				fn, _ := ref(get(pp, "FunctionName"))
				if str(get(pp, "Action")) != "lambda:InvokeFunction" || str(get(pp, "Principal")) != "apigateway.amazonaws.com" || !slices.Contains(functions, fn) {
					t.Errorf("%s: Action, Principal or FunctionName %s; want lambda:InvokeFunction by apigateway.amazonaws.com on the function", perm, describe(pp))
				}
				// Exactly when the route exists: no grant for a route that is off.
				for _, params := range []map[string]string{off, on} {
					if tpl.exists(r, params) != tpl.exists(perm, params) {
						t.Errorf("with %v, %s exists: %v, %s exists: %v; want both or neither", params, r, tpl.exists(r, params), perm, tpl.exists(perm, params))
					}
				}
				found = append(found, perm)
			}
			if len(found) != 1 {
				t.Errorf("%s: permissions %q with a SourceArn ending %s; want exactly one (API Gateway cannot invoke the function otherwise)", r, found, want)
			}
		}
	})

	t.Run("deliveries go to the standard events queue the queue function polls", func(t *testing.T) {
		v := tpl.env(apiFn)[config.EnvInboundQueueURL]
		q, ok := ref(v)
		if !ok || str(get(tpl.resources[q], "Type")) != "AWS::SQS::Queue" {
			t.Fatalf("%s: %s got %s, want !Ref of a queue", apiFn, config.EnvInboundQueueURL, describe(v))
		}
		if str(get(tpl.props(q), "FifoQueue")) == "true" {
			t.Errorf("%s: %s is FIFO; want the standard queue (an envelope has no message group)", apiFn, q)
		}
		polled := false
		for _, ev := range tpl.sqsEvents(t) {
			polled = polled || ev.function == queueFn && ev.queue == q
		}
		if !polled {
			t.Errorf("%s is not one of %s's SQS event sources; the envelopes would never be processed", q, queueFn)
		}
	})

	t.Run("the sources secret is the operator's, kept, and read only when on", func(t *testing.T) {
		for _, fn := range []string{apiFn} {
			v := tpl.env(fn)[config.EnvInboundSources]
			if v == nil || v.Tag != "!If" || len(v.Content) != 3 {
				t.Fatalf("%s: %s got %s, want !If [InboundOn, !Ref <secret>, \"\"]", fn, config.EnvInboundSources, describe(v))
			}
			secret, ok := ref(v.Content[1])
			if !tpl.condition(v.Content[0].Value, on) || tpl.condition(v.Content[0].Value, off) || !ok || str(v.Content[2]) != "" {
				t.Fatalf("%s: %s got %s, want the secret when InboundWebhooks=on, empty when off", fn, config.EnvInboundSources, describe(v))
			}
			res := tpl.resources[secret]
			if str(get(res, "Type")) != "AWS::SecretsManager::Secret" || tpl.exists(secret, off) || !tpl.exists(secret, on) {
				t.Errorf("%s: want a Secrets Manager secret created exactly when InboundWebhooks=on", secret)
			}
			for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
				if got := str(get(res, k)); got != "Retain" {
					t.Errorf("%s: %s %q; want Retain (its value is the operator's list of senders and secrets)", secret, k, got)
				}
			}
			if get(tpl.props(secret), "GenerateSecretString") != nil {
				t.Errorf("%s: GenerateSecretString; want a value the operator puts (a JSON object), not a generated one", secret)
			}
		}
	})
}

// The inbound envelope proof (docs/inbound-webhooks.md): one generated
// secret, kept, that both functions read (the API function proves with it,
// the queue function checks) and no other grant names; the queue
// function's cutover is a parameter, empty by default (unproved envelopes
// accepted as before: deploying this version changes nothing until the
// operator sets it); an alarm watches the queue function's count of
// refused envelopes. Least privilege of the grants: checkIAM, which gives
// each function GetSecretValue exactly on the secrets its environment
// names.
func TestInboundEnvelopeProofTemplate(t *testing.T) {
	tpl := loadTemplate(t)
	apiFn, queueFn := tpl.split(t)
	off, on := map[string]string{"InboundWebhooks": "off"}, map[string]string{"InboundWebhooks": "on"}
	var secret string
	for _, fn := range []string{apiFn, queueFn} {
		v := tpl.env(fn)[config.EnvInboundProofSecret]
		if v == nil || v.Tag != "!If" || len(v.Content) != 3 {
			t.Fatalf("%s: %s got %s, want !If [InboundOn, !Ref <secret>, \"\"]", fn, config.EnvInboundProofSecret, describe(v))
		}
		s, ok := ref(v.Content[1])
		if !tpl.condition(v.Content[0].Value, on) || tpl.condition(v.Content[0].Value, off) || !ok || str(v.Content[2]) != "" {
			t.Fatalf("%s: %s got %s, want the secret when InboundWebhooks=on, empty when off", fn, config.EnvInboundProofSecret, describe(v))
		}
		if secret != "" && s != secret {
			t.Errorf("%s reads proof secret %s, the other function %s; want one secret for both", fn, s, secret)
		}
		secret = s
	}
	if str(get(tpl.resources[secret], "Type")) != "AWS::SecretsManager::Secret" || tpl.exists(secret, off) || !tpl.exists(secret, on) {
		t.Errorf("%s: want a Secrets Manager secret created exactly when InboundWebhooks=on", secret)
	}
	for _, k := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
		if got := str(get(tpl.resources[secret], k)); got != "Retain" {
			t.Errorf("%s: %s %q; want Retain (a new key would refuse every proved envelope waiting in the queue and the DLQ)", secret, k, got)
		}
	}
	if want := "ExcludePunctuation: true PasswordLength: 32"; describe(sortedMapping(get(tpl.props(secret), "GenerateSecretString"))) != want {
		t.Errorf("%s: GenerateSecretString %s; want exactly %s (a 24-byte base64 key, never regenerated)", secret, describe(get(tpl.props(secret), "GenerateSecretString")), want)
	}
	// Exactly the two roles name it, each with GetSecretValue alone.
	for _, fn := range []string{apiFn, queueFn} {
		n := 0
		for _, st := range tpl.statements(tpl.roleStatements(t, fn), on) {
			for _, r := range items(get(st, "Resource")) {
				if id, ok := ref(r); ok && id == secret {
					n++
					if got := scalars(get(st, "Action")); !slices.Equal(got, []string{"secretsmanager:GetSecretValue"}) {
						t.Errorf("%s: actions %v on %s; want secretsmanager:GetSecretValue alone", fn, got, secret)
					}
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d grants on %s; want exactly one (InboundWebhooks=on)", fn, n, secret)
		}
	}

	since := tpl.env(queueFn)[config.EnvInboundProofSince]
	if p, ok := ref(since); !ok || str(get(tpl.root, "Parameters", p, "Default")) != "" {
		t.Errorf("%s: %s got %s; want !Ref a parameter whose default is empty (no cutover until the operator sets it)", queueFn, config.EnvInboundProofSince, describe(since))
	}
	if v := tpl.env(apiFn)[config.EnvInboundProofSince]; v != nil {
		t.Errorf("%s: %s is set; want it on the queue function only (the route proves; the queue path judges)", apiFn, config.EnvInboundProofSince)
	}

	alarmed := false
	for _, alarm := range tpl.ofType("AWS::CloudWatch::Alarm") {
		p := tpl.props(alarm)
		if str(get(p, "MetricName")) != "envelope_unproved" {
			continue
		}
		for _, d := range items(get(p, "Dimensions")) {
			if id, ok := ref(get(d, "Value")); ok && str(get(d, "Name")) == "FunctionName" && id == queueFn && get(tpl.resources[alarm], "Condition") == nil &&
				intOr(t, get(p, "Threshold"), -1) == 0 {
				alarmed = true
			}
		}
	}
	if !alarmed {
		t.Errorf("no unconditional alarm on %s's envelope_unproved with threshold 0; want one (a forged envelope must be seen)", queueFn)
	}
}

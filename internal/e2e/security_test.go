package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncely/oncely/internal/action"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/webhooksender"
)

type authorizer = events.APIGatewayV2HTTPRequestContextAuthorizerDescription

// api invokes the function with one POST /events from a caller.
func (f *fn) api(key, body string, auth *authorizer) events.APIGatewayV2HTTPResponse {
	f.t.Helper()
	req := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /events", RawPath: "/events", Body: body,
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": key},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "req-" + webhooksender.Alphanumeric(6), Authorizer: auth,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/events"},
		},
	}
	payload, _ := json.Marshal(req)
	raw, err := f.emu.Invoke(context.Background(), payload)
	if err != nil {
		f.t.Fatal(err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(raw, &resp); err != nil || resp.StatusCode == 0 {
		f.t.Fatalf("invoke answered %q; want an HTTP API response", raw)
	}
	return resp
}

const e2eIssuer = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Tenants"

func jwtCaller(claims map[string]string) *authorizer {
	return &authorizer{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims}}
}

func iamCaller(arn, pool, identity string) *authorizer {
	a := &authorizer{IAM: &events.APIGatewayV2HTTPRequestContextAuthorizerIAMDescription{UserARN: arn}}
	a.IAM.CognitoIdentity.IdentityPoolID, a.IAM.CognitoIdentity.IdentityID = pool, identity
	return a
}

// Each identity case through the real bootstrap: who shares a key space,
// who does not, and who is refused.
func TestE2ECallerIdentity(t *testing.T) {
	f := start(t, 10, "JWT_ISSUER="+e2eIssuer)
	const key, body = "order-7f3a9c21", `{"id":"release-42","action":"notify"}`

	t.Run("a record stored under today's scope replays after the change", func(t *testing.T) {
		// Stored as the release before this one stored it: jwt:tenant-a,
		// hashed (16 hex of SHA-256("jwt:tenant-a") = cc83083ab1c48e9c).
		const stored = "api:cc83083ab1c48e9c:" + key
		store, err := ddbstore.New(f.client, f.table, "oncely-e2e")
		if err != nil {
			t.Fatal(err)
		}
		engine, err := idem.New(idem.Options{Store: store, Lease: time.Minute, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := idem.NewRequest(stored, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if out := engine.DoWork(context.Background(), r, func(context.Context) ([]byte, idem.Effects, error) {
			return action.Encode(action.Result{Status: 200, Body: []byte(`{"delivered":true,"before":"the change"}`)}), nil, nil
		}); out.Err != nil {
			t.Fatal(out.Err)
		}
		before := f.down.Total()
		resp := f.api(key, body, jwtCaller(map[string]string{"sub": "tenant-a", "iss": e2eIssuer}))
		if resp.StatusCode != 200 || resp.Headers["Idempotent-Replayed"] != "true" || !strings.Contains(resp.Body, "the change") {
			t.Errorf("got %d %v %q; want the stored reply replayed", resp.StatusCode, resp.Headers, resp.Body)
		}
		if f.down.Total() != before {
			t.Errorf("the downstream got a delivery; want none (a replay)")
		}
	})

	t.Run("tenant B without sub is refused before any store call", func(t *testing.T) {
		// The request that read tenant A's reply before: a valid token of
		// the configured issuer without sub, A's key and A's body.
		before := f.down.Total()
		resp := f.api(key, body, jwtCaller(map[string]string{"iss": e2eIssuer, "client_id": "tenant-b"}))
		if resp.StatusCode != 401 || resp.Headers["Idempotent-Replayed"] != "" || !strings.Contains(resp.Body, "NO_IDENTITY") {
			t.Errorf("got %d %v %q; want 401 NO_IDENTITY, nothing replayed", resp.StatusCode, resp.Headers, resp.Body)
		}
		if rec := f.record("api:2f183a4e64493af3:" + key); rec != nil {
			t.Errorf("a record under the shared anonymous scope: %v; want none", rec)
		}
		if f.down.Total() != before {
			t.Errorf("the downstream got a delivery; want none")
		}
	})

	// Two callers with the same key and body, each expecting its own
	// execution (false) or sharing one key space (true).
	for _, c := range []struct {
		name   string
		a, b   *authorizer
		shared bool
	}{
		{"same sub, another issuer", jwtCaller(map[string]string{"sub": "u-1", "iss": e2eIssuer}), jwtCaller(map[string]string{"sub": "u-1", "iss": "https://other.example"}), false},
		{"two identities of one Cognito pool", iamCaller("arn:aws:sts::111122223333:assumed-role/Cognito_Auth_Role/CognitoIdentityCredentials", "us-east-1:pool", "us-east-1:a"),
			iamCaller("arn:aws:sts::111122223333:assumed-role/Cognito_Auth_Role/CognitoIdentityCredentials", "us-east-1:pool", "us-east-1:b"), false},
		{"two sessions of one IAM role (as before)", iamCaller("arn:aws:sts::111122223333:assumed-role/Publisher/i-1", "", ""), iamCaller("arn:aws:sts::111122223333:assumed-role/Publisher/i-2", "", ""), true},
		{"NONE: every caller shares one key space (as before)", nil, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := "shared-" + webhooksender.Alphanumeric(8)
			before := f.down.Total()
			first := f.api(k, body, c.a)
			second := f.api(k, body, c.b)
			replayed := second.Headers["Idempotent-Replayed"] == "true"
			if first.StatusCode != 200 || second.StatusCode != 200 || replayed != c.shared {
				t.Errorf("got %d then %d (replayed %v); want 200 twice, replayed: %v", first.StatusCode, second.StatusCode, replayed, c.shared)
			}
			want := 2
			if c.shared {
				want = 1
			}
			if n := f.down.Total() - before; n != want {
				t.Errorf("deliveries %d; want %d", n, want)
			}
		})
	}
}

// The URL from its secret: delivered to, and never in the output or the
// records; a secret that holds no URL fails the init with one line naming
// the secret, not the value.
func TestE2EDownstreamURLFromASecret(t *testing.T) {
	name := "oncely-e2e-url-" + webhooksender.Alphanumeric(8)
	f := start(t, 10, "DOWNSTREAM_URL=", "DOWNSTREAM_URL_SECRET="+name)
	const token = "T0KEN-s3cr3t"
	// The function reads it at its first invoke: create it now.
	if _, err := f.sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &name, SecretString: aws.String(f.hookURL + "/webhook/" + token + "?sig=" + token)}); err != nil {
		t.Fatal(err)
	}
	if ids := f.sqs(sqsBatch(t, [2]string{"m1", body42})); len(ids) != 0 {
		t.Fatalf("failures %v", ids)
	}
	if n := f.down.Count(key42); n != 1 {
		t.Fatalf("deliveries %d; want 1", n)
	}
	if strings.Contains(f.emu.Log(), token) {
		t.Errorf("the URL's token appears in the function's output")
	}
	if item, _ := json.Marshal(f.record(key42)); strings.Contains(string(item), token) {
		t.Errorf("the URL's token appears in the record")
	}
	if strings.Contains(f.emu.Log(), "plain http") {
		t.Errorf("a warning about plain http for a downstream on this machine (a local run)")
	}

	bad := "oncely-e2e-url-" + webhooksender.Alphanumeric(8)
	g := start(t, 10, "DOWNSTREAM_URL=", "DOWNSTREAM_URL_SECRET="+bad)
	if _, err := g.sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &bad, SecretString: aws.String("hooks.example.com/" + token)}); err != nil {
		t.Fatal(err)
	}
	body, err := g.emu.Invoke(context.Background(), sqsBatch(t, [2]string{"m1", body42}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "batchItemFailures") {
		t.Fatalf("answered %q; want a failed init", body)
	}
	waitLog(t, g, "config: DOWNSTREAM_URL_SECRET: secret "+bad+": want an http or https URL")
	if strings.Contains(g.emu.Log(), token) {
		t.Errorf("the bad value appears in the function's output")
	}
}

func waitLog(t *testing.T, f *fn, want string) {
	t.Helper()
	if !outputSoon(f, func(log string) bool { return strings.Contains(log, want) }) {
		t.Fatalf("no %q in the function's output:\n%s", want, f.emu.Log())
	}
}

// outputSoon reports whether the function's output satisfies ok within 10 s:
// what the function prints reaches the log through a pipe, which may be
// read after the invocation has answered.
func outputSoon(f *fn, ok func(log string) bool) bool {
	for deadline := time.Now().Add(10 * time.Second); !ok(f.emu.Log()); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// A plain-http downstream outside a local run: one warning at init, naming
// the scheme and host only.
func TestE2EPlainHTTPDownstreamWarnsOnce(t *testing.T) {
	f := start(t, 10, "DOWNSTREAM_URL=http://192.0.2.1/hook?token=T0KEN-s3cr3t")
	for range 2 {
		// No key: answered 400 before any delivery; the init ran.
		if resp := f.api("", `{}`, nil); resp.StatusCode != 400 {
			t.Fatalf("status %d; want 400", resp.StatusCode)
		}
	}
	const want = "misconfiguration: the downstream is plain http (http://192.0.2.1)"
	waitLog(t, f, want)
	if n := strings.Count(f.emu.Log(), want); n != 1 {
		t.Errorf("the warning appears %d times; want once (at init)", n)
	}
	if strings.Contains(f.emu.Log(), "T0KEN") {
		t.Errorf("the URL's query appears in the output")
	}
}

// rotation is the documented procedure (docs/security.md): these lines
// must appear in the docs as they are, and the test below performs each
// with the SDK, in order, against moto's Secrets Manager.
var rotation = []string{
	`NEW=$(head -c 48 /dev/urandom | base64)`,
	`aws secretsmanager put-secret-value --secret-id "$SECRET" --secret-string "$NEW" --version-stages AWSPENDING`,
	`PENDING=$(aws secretsmanager list-secret-version-ids --secret-id "$SECRET" --query "Versions[?contains(VersionStages, 'AWSPENDING')].VersionId" --output text)`,
	`CURRENT=$(aws secretsmanager list-secret-version-ids --secret-id "$SECRET" --query "Versions[?contains(VersionStages, 'AWSCURRENT')].VersionId" --output text)`,
	`aws secretsmanager update-secret-version-stage --secret-id "$SECRET" --version-stage AWSCURRENT --move-to-version-id "$PENDING" --remove-from-version-id "$CURRENT"`,
	`aws secretsmanager update-secret-version-stage --secret-id "$SECRET" --version-stage AWSPENDING --remove-from-version-id "$PENDING"`,
	`PREVIOUS=$(aws secretsmanager list-secret-version-ids --secret-id "$SECRET" --query "Versions[?contains(VersionStages, 'AWSPREVIOUS')].VersionId" --output text)`,
	`aws secretsmanager update-secret-version-stage --secret-id "$SECRET" --version-stage AWSPREVIOUS --remove-from-version-id "$PREVIOUS"`,
}

// The docs hold the procedure's commands verbatim.
func TestRotationProcedureIsDocumented(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	var all strings.Builder
	for _, p := range append(docs, "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	for _, line := range rotation {
		if !strings.Contains(all.String(), line) {
			t.Errorf("the docs lack the rotation step %q", line)
		}
	}
}

// A rotation walked step by step, as documented, while the function
// delivers: at every step a receiver holding the old secret and one holding
// the new one verify with PyPI's standardwebhooks exactly when they should,
// and an invalid pending version never stops a delivery or a cold start.
func TestE2ERotationNeverBreaksDeliveries(t *testing.T) {
	f := start(t, 10, "WEBHOOK_SECRET_REFRESH=1ms")
	ctx := context.Background()
	out, err := exec.Command("bash", "-c", strings.TrimSuffix(strings.TrimPrefix(rotation[0], "NEW=$("), ")")).Output()
	if err != nil {
		t.Fatal(err)
	}
	newValue := strings.TrimSpace(string(out))
	if key, err := base64.StdEncoding.DecodeString(newValue); len(newValue) != 64 || err != nil || len(key) < 24 {
		t.Fatalf("the documented generator gave %d characters (%v); want 64 of base64", len(newValue), err)
	}
	oldSecret, newSecret := f.secret, "whsec_"+newValue
	versionOf := func(stage string) string {
		t.Helper()
		v, err := f.sm.ListSecretVersionIds(ctx, &secretsmanager.ListSecretVersionIdsInput{SecretId: &f.secretARN})
		if err != nil {
			t.Fatal(err)
		}
		for _, ver := range v.Versions {
			if slices.Contains(ver.VersionStages, stage) {
				return *ver.VersionId
			}
		}
		t.Fatalf("no version is %s", stage)
		return ""
	}
	move := func(stage, to, from string) {
		t.Helper()
		in := &secretsmanager.UpdateSecretVersionStageInput{SecretId: &f.secretARN, VersionStage: &stage}
		if to != "" {
			in.MoveToVersionId = &to
		}
		if from != "" {
			in.RemoveFromVersionId = &from
		}
		if _, err := f.sm.UpdateSecretVersionStage(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]verifyCase{}
	want := map[string][2]bool{} // step -> verifies with (old, new)
	n := 0
	// Each delivery re-reads the keys first (WEBHOOK_SECRET_REFRESH=1ms),
	// and waits for that read (it runs with its own timeout, not the
	// delivery's): once a step is visible in Secrets Manager, no delivery
	// is signed with the keys from before it. A failed re-read is no
	// excuse: it fails the step.
	deliver := func(step string, old, new bool) {
		t.Helper()
		n++
		id := fmt.Sprintf("rotation-%d", n)
		if ids := f.sqs(sqsBatch(t, [2]string{"m-" + id, `{"id":"` + id + `","action":"notify"}`})); len(ids) != 0 {
			t.Fatalf("%s: failures %v; want the delivery made", step, ids)
		}
		audit := f.down.Audit()
		d := audit[len(audit)-1]
		if d.Key != "evt:"+id+":notify" {
			t.Fatalf("%s: the last delivery is %s", step, d.Key)
		}
		cases[step] = verifyCase{headers: d.Headers, body: d.Body}
		want[step] = [2]bool{old, new}
	}

	deliver("0 before", true, false)
	// 1. The new value as AWSPENDING: both sign.
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &f.secretARN, SecretString: &newValue, VersionStages: []string{"AWSPENDING"}}); err != nil {
		t.Fatal(err)
	}
	deliver("1 pending", true, true)
	// 2. Receivers take the new secret (nothing to run here).
	// 3. Promote; the old version is AWSPREVIOUS, and still signs.
	pending, current := versionOf("AWSPENDING"), versionOf("AWSCURRENT")
	move("AWSCURRENT", pending, current)
	move("AWSPENDING", "", pending)
	deliver("3 promoted", true, true)
	// An invalid pending version (the 18-byte key that failed cold starts)
	// is ignored: deliveries go on, a cold start too.
	short := base64.StdEncoding.EncodeToString(make([]byte, 18))
	if _, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &f.secretARN, SecretString: &short, VersionStages: []string{"AWSPENDING"}}); err != nil {
		t.Fatal(err)
	}
	deliver("3 with an invalid pending", true, true)
	if err := f.emu.KillRuntime(); err != nil {
		t.Fatal(err)
	}
	// The emulator reports the killed runtime to the next invoke (whatever
	// it carries), and starts a fresh one, with a new init, for the one after.
	_, _ = f.emu.Invoke(ctx, []byte(`{"requestContext":{"http":{"method":"POST"}}}`))
	deliver("3 cold start with an invalid pending", true, true)
	// The function's output reaches the log behind the invocation's answer
	// (an EMF document is printed last): wait for what is checked.
	if !outputSoon(f, func(log string) bool { return strings.Count(log, "signing secret version ignored") >= 2 }) {
		t.Errorf("%d warnings about the invalid version; want one at the re-read and one at the new init", strings.Count(f.emu.Log(), "signing secret version ignored"))
	}
	if !outputSoon(f, regexp.MustCompile(`"signing_key_ignored":[1-9]`).MatchString) {
		t.Errorf("no EMF document counts signing_key_ignored")
	}
	move("AWSPENDING", "", versionOf("AWSPENDING"))
	// 4. The last step: AWSPREVIOUS removed, the old secret no longer signs.
	move("AWSPREVIOUS", "", versionOf("AWSPREVIOUS"))
	deliver("4 previous removed", false, true)

	if strings.Contains(f.emu.Log(), "signing secret not re-read") {
		t.Errorf("a re-read of the keys failed during the rotation: a delivery may have been signed with the keys from before a step")
	}
	for who, secret := range map[int]string{0: oldSecret, 1: newSecret} {
		got := verify(t, secret, cases)
		for step, w := range want {
			if v := got[step]; v.OK != w[who] {
				t.Errorf("%s: a receiver holding the %s secret verified: %v (%s); want %v", step, []string{"old", "new"}[who], v.OK, v.Error, w[who])
			}
		}
	}
	if strings.Contains(f.emu.Log(), newValue) || strings.Contains(f.emu.Log(), strings.TrimPrefix(oldSecret, "whsec_")) {
		t.Errorf("a signing secret appears in the function's output")
	}
}

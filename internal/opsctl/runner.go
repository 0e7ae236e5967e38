package opsctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/oncely/oncely/apigw"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/inbound"
	"github.com/oncely/oncely/keyexpr"
)

// runner is one run of one command.
type runner struct {
	env Env
	cmd string
	// args and summary are the command's, for -h.
	args, summary string
	log           *slog.Logger
	exit          int // the exit code when the command returns no error (a batch may end 3 or 4)

	table, namespace, keyExpr, payloadExpr, profile, region string
	json                                                    bool
	settings                                                settings // what resolve resolved

	cfg   aws.Config
	admin *ddbstore.Admin
	info  ddbstore.TableInfo
}

// flags returns the command's flag set with the flags every command takes.
func (r *runner) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("oncelyctl "+r.cmd, flag.ContinueOnError)
	fs.StringVar(&r.table, "table", "", "the records table (default: $"+config.EnvTable+")")
	fs.StringVar(&r.namespace, "namespace", "", "the function's namespace (default: $"+config.EnvNamespace+", else $"+config.EnvFunctionName+")")
	fs.StringVar(&r.keyExpr, "key-expr", "", "the function's key expression (default: $"+config.EnvKeyJMESPath+", else "+keyexpr.DefaultExpression+")")
	fs.StringVar(&r.payloadExpr, "payload-expr", "", "the function's payload expression, which get --body fingerprints by (default: $"+config.EnvPayloadJMESPath+", else the whole body)")
	fs.StringVar(&r.profile, "profile", "", "the AWS profile (default: the SDK's, $AWS_PROFILE)")
	fs.StringVar(&r.region, "region", "", "the AWS region (default: the SDK's, $AWS_REGION)")
	fs.BoolVar(&r.json, "json", false, "print JSON for scripts instead of tables")
	return fs
}

// parse parses flags interspersed with arguments ("get KEY --json"). After
// "--" nothing is a flag, and an argument there that looks like one is
// refused: "release KEY -- --dry-run" must never release for real and then
// look for a record named "--dry-run". Errors are one line; -h prints the
// command's usage and flags on stdout.
func (r *runner) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			for _, p := range args[i+1:] {
				if strings.HasPrefix(p, "-") {
					return nil, usagef("%q after \"--\" looks like a flag: nothing after \"--\" is read as one, and no key starts with '-'; put flags before \"--\"", p)
				}
			}
			return append(pos, args[i+1:]...), nil
		case len(a) < 2 || a[0] != '-':
			pos = append(pos, a)
			continue
		}
		// One flag, with its value when it takes one and is not written
		// --name=value.
		one := args[i : i+1]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			one = args[i : i+2]
			i++
		}
		if err := fs.Parse(one); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				r.help(fs)
				return nil, err
			}
			return nil, usagef("%v (oncelyctl %s -h lists the flags)", err, r.cmd)
		}
	}
	return pos, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// help prints the command's usage and flags on stdout (help is output,
// not an error: oncelyctl list -h | less).
func (r *runner) help(fs *flag.FlagSet) {
	fmt.Fprintf(r.env.Stdout, "usage: oncelyctl %s %s\n\n%s\n\nflags:\n", r.cmd, r.args, r.summary)
	fs.SetOutput(r.env.Stdout)
	fs.PrintDefaults()
}

// set reports whether the flag name was given.
func set(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// setting is a resolved value and where it came from.
type setting struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

type settings struct {
	Table       setting `json:"table"`
	Namespace   setting `json:"namespace"`
	KeyExpr     setting `json:"key_expression"`
	PayloadExpr setting `json:"payload_expression"`
	// configuredNamespace is the namespace the configuration gives, had
	// --namespace not been passed (empty: none).
	configuredNamespace setting
}

// resolve picks each setting from its flag, else the function's own
// environment variable (the same name the function reads), else its
// default. The key and payload expressions are resolved alike: a body is
// keyed and fingerprinted as the function does it.
func (r *runner) resolve() (settings, error) {
	pick := func(flagName, flagValue string, vars ...string) setting {
		if flagValue != "" {
			return setting{flagValue, "--" + flagName}
		}
		for _, v := range vars {
			if val := strings.TrimSpace(r.env.Getenv(v)); val != "" {
				return setting{val, "$" + v}
			}
		}
		return setting{}
	}
	s := settings{
		Table:               pick("table", r.table, config.EnvTable),
		Namespace:           pick("namespace", r.namespace, config.EnvNamespace, config.EnvFunctionName),
		KeyExpr:             pick("key-expr", r.keyExpr, config.EnvKeyJMESPath),
		PayloadExpr:         pick("payload-expr", r.payloadExpr, config.EnvPayloadJMESPath),
		configuredNamespace: pick("namespace", "", config.EnvNamespace, config.EnvFunctionName),
	}
	if s.KeyExpr.Value == "" {
		s.KeyExpr = setting{keyexpr.DefaultExpression, "default"}
	}
	if s.PayloadExpr.Value == "" {
		s.PayloadExpr = setting{"", "default (the whole body)"}
	}
	r.settings = s
	switch {
	case s.Table.Value == "":
		return s, usagef("no table: pass --table, or set %s as the function has it", config.EnvTable)
	case s.Namespace.Value == "":
		return s, usagef("no namespace: pass --namespace, or set %s as the function has it (its default is the function's name, %s)", config.EnvNamespace, config.EnvFunctionName)
	case strings.Contains(s.Namespace.Value, "#"):
		return s, usagef("namespace %q (from %s) contains '#'; the function's never does", s.Namespace.Value, s.Namespace.Source)
	}
	if _, err := keyexpr.New(s.KeyExpr.Value, s.PayloadExpr.Value); err != nil {
		return s, usagef("%v (the key expression from %s, the payload expression from %s)", err, s.KeyExpr.Source, s.PayloadExpr.Source)
	}
	return s, nil
}

// connect loads the AWS configuration, checks that there are credentials,
// and opens and checks the table.
func (r *runner) connect(ctx context.Context) error {
	s, err := r.resolve()
	if err != nil {
		return err
	}
	if r.cfg, err = r.env.AWS(ctx, r.profile, r.region); err != nil {
		return fmt.Errorf("AWS configuration: %w", err)
	}
	if r.cfg.Region == "" {
		return errors.New("no AWS region: set AWS_REGION (or a profile's region), or pass --region")
	}
	if r.cfg.Credentials == nil {
		return errors.New("no AWS credentials: set AWS_PROFILE (or pass --profile), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if _, err := r.cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("no AWS credentials: set AWS_PROFILE (or pass --profile), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or log in (aws sso login); the SDK said: %v", err)
	}
	if r.admin, err = ddbstore.NewAdmin(dynamodb.NewFromConfig(r.cfg), s.Table.Value, s.Namespace.Value); err != nil {
		return err
	}
	if r.info, err = r.admin.Check(ctx); err != nil {
		return err
	}
	return nil
}

// who names the caller for the audit: the STS caller identity, else the
// local user, marked unverified.
func (r *runner) who(ctx context.Context) string {
	out, err := sts.NewFromConfig(r.cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err == nil && aws.ToString(out.Arn) != "" {
		return aws.ToString(out.Arn)
	}
	user := r.env.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	r.log.Warn("no STS caller identity; the audit names the local user, unverified", "error", oneLine(fmt.Sprint(err)))
	return "unverified local user " + user
}

func (r *runner) newToken() string {
	if r.env.NewToken != nil {
		return r.env.NewToken()
	}
	return idem.NewToken()
}

// keyFlags are the ways to name a record.
type keyFlags struct {
	id, action, apiKey, caller, body string
	source, deliveryID               string // an inbound webhook's
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.id, "id", "", "the event's id: with --action, the key the function's key expression gives")
	fs.StringVar(&k.action, "action", "", "the event's action (with --id)")
	fs.StringVar(&k.apiKey, "api-key", "", "an API caller's Idempotency-Key (with --caller)")
	fs.StringVar(&k.caller, "caller", "anonymous", `the API caller's scope: anonymous, jwt:SUB (the configured issuer), jwt@"ISSUER":SUB (another issuer), iam:ARN, cognito:POOL/IDENTITY or lambda:PRINCIPAL`)
	fs.StringVar(&k.body, "body", "", "a file holding the event body (- for stdin): its key, by the key expression, and its payload are checked; with --source, a GitHub delivery's body (as GitHub's Recent Deliveries shows it): its key, wh:SOURCE:sha256:DIGEST")
	fs.StringVar(&k.source, "source", "", "an inbound webhook's source (POST /webhooks/SOURCE), with --delivery-id or --body")
	fs.StringVar(&k.deliveryID, "delivery-id", "", "with --source, a delivery's id (webhook-id, the Stripe event's id, or X-GitHub-Delivery): its key, wh:SOURCE:ID; a GitHub delivery has it only if received before deliveries were keyed by their body (use --body)")
}

// named is a key and, when it came from a body, that body's fingerprint;
// hint is said when there is no record under it.
type named struct {
	key         string
	fingerprint string
	hint        string
}

// keys returns the records args and the key flags name, by the resolved
// key and payload expressions. Exactly one way of naming is allowed; a
// malformed key is a usage error.
func (r *runner) keys(k keyFlags, args []string, s settings) ([]named, error) {
	keyExpr := s.KeyExpr.Value
	ways := 0
	delivery := k.source != "" || k.deliveryID != ""
	for _, used := range []bool{len(args) > 0, k.id != "" || k.action != "", k.apiKey != "", k.body != "" && !delivery, delivery} {
		if used {
			ways++
		}
	}
	if ways != 1 {
		return nil, usagef("name the record one way: KEY..., --id and --action, --api-key (with --caller), --body, or --source with --delivery-id or --body")
	}
	if delivery {
		return r.inboundKey(k)
	}
	x, err := keyexpr.New(keyExpr, s.PayloadExpr.Value)
	if err != nil {
		return nil, usagef("%v", err)
	}
	switch {
	case len(args) > 0:
		var out []named
		for _, a := range args {
			if err := idem.ValidateKey(a); err != nil {
				return nil, usagef("malformed key %q: %s", a, err.(*idem.Error).Message)
			}
			out = append(out, named{key: a})
		}
		return out, nil
	case k.id != "" || k.action != "":
		if k.id == "" || k.action == "" {
			return nil, usagef("--id and --action go together")
		}
		body, _ := json.Marshal(map[string]string{"id": k.id, "action": k.action})
		req, err := x.Request(body)
		if err != nil {
			return nil, usagef("--id %q --action %q give no key with the key expression %q: %s", k.id, k.action, keyExpr, err.(*idem.Error).Message)
		}
		return []named{{key: req.Key}}, nil
	case k.apiKey != "":
		scope, err := scopeOf(k.caller)
		if err != nil {
			return nil, err
		}
		if err := apigw.ValidateClientKey(k.apiKey); err != nil {
			return nil, usagef("malformed --api-key %q: %v", k.apiKey, err)
		}
		return []named{{key: apigw.ScopedKey(scope, k.apiKey)}}, nil
	default:
		return r.keyOfBody(k.body, x, keyExpr)
	}
}

// keyOfBody is the record --body names: the key and payload fingerprint
// the function's expressions x (keyExpr is the key expression's text) give
// the body in the file named, or on stdin for "-".
func (r *runner) keyOfBody(file string, x *keyexpr.Extractor, keyExpr string) ([]named, error) {
	body, err := r.readBody(file)
	if err != nil {
		return nil, err
	}
	req, err := x.Request(body)
	if err != nil {
		return nil, usagef("--body %s gives no key with the key expression %q: %s", file, keyExpr, err.(*idem.Error).Message)
	}
	return []named{{key: req.Key, fingerprint: req.Fingerprint}}, nil
}

// inboundKey is the record of an inbound webhook's delivery that --source
// and --delivery-id or --body name: wh:SOURCE:ID, the key of a Standard
// Webhooks or Stripe delivery (and of a GitHub delivery received before
// GitHub deliveries were keyed by their body); or, from the body, a GitHub
// delivery's key, wh:SOURCE:sha256:DIGEST (inbound.BodyKey: the digest is
// of the body's canonical JSON, so the body as GitHub shows it, indented,
// names the same record), with the body's fingerprint.
func (r *runner) inboundKey(k keyFlags) ([]named, error) {
	switch {
	case k.source == "":
		return nil, usagef("--delivery-id goes with --source")
	case (k.deliveryID == "") == (k.body == ""):
		return nil, usagef("--source takes one of --delivery-id (wh:SOURCE:ID) and --body (a GitHub delivery's body: wh:SOURCE:sha256:DIGEST)")
	case k.deliveryID != "":
		key, err := inbound.Key(k.source, k.deliveryID)
		if err != nil {
			return nil, usagef("--source %q --delivery-id %q give no key: %s", k.source, k.deliveryID, err.(*idem.Error).Message)
		}
		return []named{{key: key, hint: "a GitHub delivery received since deliveries are keyed by their body is under wh:" + k.source + ":sha256:DIGEST: name it with --source " + k.source + " --body FILE"}}, nil
	}
	body, err := r.readBody(k.body)
	if err != nil {
		return nil, err
	}
	key, digest, err := inbound.BodyKey(k.source, body)
	if err != nil {
		return nil, usagef("--source %q --body %s give no key: %s", k.source, k.body, err.(*idem.Error).Message)
	}
	return []named{{key: key, fingerprint: digest}}, nil
}

// readBody reads the file named, or stdin for "-".
func (r *runner) readBody(file string) ([]byte, error) {
	var body []byte
	var err error
	if file == "-" {
		body, err = io.ReadAll(r.env.Stdin)
	} else {
		body, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usagef("--body: %v", err)
	}
	return body, nil
}

// scopeOf turns --caller into the scope the API adapter uses.
func scopeOf(caller string) (string, error) {
	scope, err := apigw.ParseScope(caller)
	if err != nil {
		return "", usagef("--caller %q: %v (the scope the API keys by)", caller, err)
	}
	return scope, nil
}

// printJSON writes v as indented JSON.
func (r *runner) printJSON(v any) error {
	enc := json.NewEncoder(r.env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// config is the config command: the settings and their sources.
func (r *runner) config(_ context.Context, args []string) error {
	fs := r.flags()
	pos, err := r.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("config takes no arguments, got %q", pos)
	}
	s, err := r.resolve()
	if err != nil {
		return err
	}
	if r.json {
		return r.printJSON(s)
	}
	tw := newTable(r.env.Stdout)
	tw.row("table", s.Table.Value, "from "+s.Table.Source)
	tw.row("namespace", s.Namespace.Value, "from "+s.Namespace.Source)
	tw.row("key expression", s.KeyExpr.Value, "from "+s.KeyExpr.Source)
	payload := s.PayloadExpr.Value
	if payload == "" {
		payload = "-"
	}
	tw.row("payload expression", payload, "from "+s.PayloadExpr.Source)
	return tw.flush()
}

// Command devstack keeps a local oncely stack up for operators to try
// oncelyctl on: the records table in moto (with the template's triage
// index), the real bootstrap under the Lambda Runtime Interface Emulator,
// and a fake downstream whose bugs and outages are switched on and off.
// The function runs with the operator's own configuration: its variables
// from the environment or an env file (-env-file), checked as the function
// checks them at init. It prints what the function runs with and how to
// reach everything, writes the variables to export into a file, and stops
// everything at Ctrl-C.
//
// Its other commands drive the stack from another terminal, so that the
// walkthrough in docs/operating.md needs nothing but what the project builds:
//
//	devstack invoke FILE          send an event (an SQS batch) to the function; print its answer
//	devstack rules JSON | clear   set or clear the fake downstream's rules
//	devstack deliveries           print what the fake downstream answered, per key
//	devstack body FILE [N]        print the body of record N (default 1) of an SQS event file
//
// `make stack` builds it and runs it under tools/with-moto.sh. It is a
// development tool: it links test support (the emulator driver and the
// fake webhook) and is never deployed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/rie"
)

// functionName is the stack's AWS_LAMBDA_FUNCTION_NAME (the namespace's
// default, were IDEMPOTENCY_NAMESPACE unset).
const functionName = "oncely-QueueFunction"

// invokePath is the emulator's invoke path under $ONCELY_FUNCTION.
const invokePath = "/2015-03-31/functions/function/invocations"

// errRefused means the function's configuration was refused, as the
// function refuses it at init; what was wrong is already printed.
var errRefused = errors.New("the function's configuration is refused")

func main() {
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		os.Exit(client(os.Args[1], os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
	rieBin := flag.String("rie", ".tools/bin/aws-lambda-rie", "path to aws-lambda-rie")
	boot := flag.String("bootstrap", ".tools/host/bootstrap", "the bootstrap built for this machine")
	dir := flag.String("dir", ".tools/stack", "where the env file and the function's log go")
	bin := flag.String("bin", "bin", "where oncelyctl and devstack are (added to PATH in the env file)")
	envFile := flag.String("env-file", "", "the function's variables: NAME=value lines, or SAM's env.json; they win over the environment's")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: devstack [flags]   keep the stack up until Ctrl-C\n"+
			"       devstack invoke FILE | rules JSON|clear | deliveries | body FILE [N]\n\n"+
			"The function runs with the stack's defaults, overridden by its variables set in\n"+
			"the environment (%s, ...), overridden by -env-file.\n\nflags:\n", config.EnvTTL)
		flag.PrintDefaults()
	}
	flag.CommandLine.SetOutput(os.Stdout)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Getenv, options{rie: *rieBin, bootstrap: *boot, dir: *dir, bin: *bin, envFile: *envFile}); err != nil {
		if !errors.Is(err, errRefused) {
			fmt.Fprintln(os.Stderr, "devstack:", err)
		}
		os.Exit(1)
	}
}

type options struct {
	rie, bootstrap, dir, bin, envFile string
}

func run(ctx context.Context, w io.Writer, getenv func(string) string, o options) error {
	moto := getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if moto == "" {
		return errors.New("AWS_ENDPOINT_URL_DYNAMODB is not set: run `make stack`, which starts moto")
	}
	var file map[string]string
	if o.envFile != "" {
		var err error
		if file, err = readEnvFile(o.envFile); err != nil {
			return fmt.Errorf("-env-file: %w", err)
		}
	}

	down := fakewebhook.New()
	defer down.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: down, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	webhook := "http://" + l.Addr().String()

	settings, ignored := functionEnv(getenv, file, webhook+"/webhook")
	printSettings(w, settings, ignored)
	// The function's own check, on the values it will get: a bad value
	// stops the stack here with the line the function's init prints.
	cfg, err := config.Load(lookup(settings, map[string]string{config.EnvFunctionName: functionName}))
	if err != nil {
		fmt.Fprintf(w, "\nThe function refuses this configuration at init, as it would deployed:\n%v\n", err)
		return errRefused
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	client := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &moto})
	if _, err := ddbstore.CreateTable(ctx, client, cfg.Table); err != nil {
		return err
	}
	if cfg.Action == config.ActionLedger && cfg.LedgerTable != cfg.Table {
		// The ledger's entries are keyed by pk, as the records are.
		if _, err := ddbstore.CreateTable(ctx, client, cfg.LedgerTable); err != nil {
			return err
		}
	}

	logPath := filepath.Join(o.dir, "function.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	env := rie.Local{DynamoDB: moto, SQS: getenv("AWS_ENDPOINT_URL_SQS"), Table: cfg.Table, DownstreamURL: webhook + "/webhook", Name: functionName, TimeoutSeconds: 30}.Env()
	emu, err := rie.Start(rie.Options{RIE: o.rie, Bootstrap: o.bootstrap, Log: logFile, Env: append(env, environ(settings)...)})
	if err != nil {
		return err
	}
	defer emu.Stop()
	// The function's init runs on the first invoke: run it now, with a
	// request it answers without a store call, so that an init failure
	// (a secret it cannot read) stops the stack with the function's words.
	if answer, err := emu.Invoke(ctx, []byte(warmUp)); err != nil || isFunctionError(answer) {
		// The emulator may answer before it has written what the runtime
		// said: stop it, which waits for its output, then show the log.
		emu.Stop()
		fmt.Fprintf(w, "\nThe function failed to start (%s). Its log (%s):\n%s", strings.TrimSpace(string(answer)), logPath, emu.Log())
		if err != nil {
			return err
		}
		return errRefused
	}
	functionURL := strings.TrimSuffix(emu.URL, invokePath)

	absBin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	envPath := filepath.Join(o.dir, "env")
	if err := os.WriteFile(envPath, []byte(envFileText(envPath, moto, settings, functionURL, webhook, absBin)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, `
oncely local stack
  DynamoDB and STS (moto)   %s   table %s, namespace %s
  the function (emulator)   %s   its log: %s
  the fake downstream       %s   devstack rules / deliveries

In another terminal:
  source %s
  oncelyctl config

Then follow the walkthrough in docs/operating.md. Ctrl-C stops everything.
`, moto, cfg.Table, cfg.Namespace, functionURL, logPath, webhook, envPath)
	<-ctx.Done()
	fmt.Fprintln(w, "\nstopping: the emulator and the function, the fake downstream, then moto")
	return os.Remove(envPath)
}

// warmUp is an API request for a route the function does not serve: it
// answers 404 before any store call, after its init has run.
const warmUp = `{"version":"2.0","routeKey":"$default","rawPath":"/devstack-warm-up","headers":{},` +
	`"requestContext":{"http":{"method":"GET","path":"/devstack-warm-up","sourceIp":"127.0.0.1"},"requestId":"devstack-warm-up"},"isBase64Encoded":false}`

// isFunctionError reports whether an invoke's answer is Lambda's error
// shape (a handler error, a failed init, a crash).
func isFunctionError(answer []byte) bool {
	var e struct {
		ErrorType    string `json:"errorType"`
		ErrorMessage string `json:"errorMessage"`
	}
	return json.Unmarshal(answer, &e) == nil && (e.ErrorType != "" || e.ErrorMessage != "")
}

// printSettings says what the function runs with, and where each value
// came from.
func printSettings(w io.Writer, settings []setting, ignored []string) {
	fmt.Fprintln(w, "The function runs with (the stack's defaults, then your environment, then -env-file):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range settings {
		note := ""
		if s.Note != "" {
			note = "; " + s.Note
		}
		fmt.Fprintf(tw, "  %s\t%s\t(%s%s)\n", s.Name, s.Value, s.Source, note)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  Every other variable is unset: the function's default (the Configuration docs).")
	if len(ignored) > 0 {
		fmt.Fprintf(w, "  Ignored from the env file, not variables the function reads (the stack sets its endpoints): %s\n", strings.Join(ignored, ", "))
	}
}

// envFileText is the file operators source in another terminal.
func envFileText(path, moto string, settings []setting, functionURL, webhook, bin string) string {
	get := lookup(settings, nil)
	var b strings.Builder
	fmt.Fprintf(&b, `# The oncely local stack (make stack). In another terminal: source %s
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
# moto serves DynamoDB and STS: oncelyctl talks to it.
export AWS_ENDPOINT_URL=%s
# The function's own variables, which oncelyctl reads as the function does.
`, path, moto)
	for _, name := range []string{config.EnvTable, config.EnvNamespace, config.EnvKeyJMESPath, config.EnvPayloadJMESPath} {
		if v := get(name); v != "" {
			fmt.Fprintf(&b, "export %s=%q\n", name, v)
		} else {
			fmt.Fprintf(&b, "unset %s\n", name)
		}
	}
	fmt.Fprintf(&b, `# The function under the Lambda emulator: devstack invoke FILE
export ONCELY_FUNCTION=%s
# The fake downstream: devstack rules JSON|clear, devstack deliveries
export ONCELY_WEBHOOK=%s
export PATH=%q:"$PATH"
`, functionURL, webhook, bin)
	return b.String()
}

// client runs one of the commands that drive a running stack, and returns
// the exit code.
func client(cmd string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "devstack %s: %s\n", cmd, fmt.Sprintf(format, a...))
		return 1
	}
	endpoint := func(name string) (string, bool) {
		v := getenv(name)
		return v, v != ""
	}
	switch cmd {
	case "invoke":
		if len(args) != 1 {
			return fail("want one file: devstack invoke FILE (- for stdin)")
		}
		base, ok := endpoint("ONCELY_FUNCTION")
		if !ok {
			return fail("ONCELY_FUNCTION is not set: source the stack's env file (make stack prints where it is)")
		}
		payload, err := readArg(args[0], stdin)
		if err != nil {
			return fail("%v", err)
		}
		answer, status, err := send(http.MethodPost, base+invokePath, payload)
		if err != nil {
			return fail("%v", err)
		}
		fmt.Fprintln(stdout, strings.TrimSpace(string(answer)))
		if status >= 300 || isFunctionError(answer) {
			return fail("the function answered with an error (HTTP %d): its log is in the stack's directory (function.log)", status)
		}
		return 0
	case "rules", "deliveries":
		base, ok := endpoint("ONCELY_WEBHOOK")
		if !ok {
			return fail("ONCELY_WEBHOOK is not set: source the stack's env file (make stack prints where it is)")
		}
		method, path, body := http.MethodGet, "/deliveries", []byte(nil)
		switch {
		case cmd == "deliveries" && len(args) == 0:
		case cmd == "rules" && len(args) == 1 && args[0] == "clear":
			method, path = http.MethodDelete, "/rules"
		case cmd == "rules" && len(args) == 1:
			method, path, body = http.MethodPut, "/rules", []byte(args[0])
		default:
			return fail(`want: devstack rules '[{"match":"evt:*:refund","status":422}]' | devstack rules clear | devstack deliveries`)
		}
		answer, status, err := send(method, base+path, body)
		if err != nil {
			return fail("%v", err)
		}
		if status >= 300 {
			return fail("the fake downstream answered %d: %s", status, strings.TrimSpace(string(answer)))
		}
		if len(bytes.TrimSpace(answer)) > 0 {
			fmt.Fprintln(stdout, strings.TrimSpace(string(answer)))
		}
		return 0
	case "body":
		if len(args) < 1 || len(args) > 2 {
			return fail("want: devstack body FILE [N] (record N of an SQS event file, from 1)")
		}
		data, err := readArg(args[0], stdin)
		if err != nil {
			return fail("%v", err)
		}
		n := 1
		if len(args) == 2 {
			if _, err := fmt.Sscan(args[1], &n); err != nil || n < 1 {
				return fail("record %q: want a number from 1", args[1])
			}
		}
		var ev events.SQSEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return fail("%s is not an SQS event: %v", args[0], err)
		}
		if n > len(ev.Records) {
			return fail("%s has %d records, not %d", args[0], len(ev.Records), n)
		}
		fmt.Fprintln(stdout, ev.Records[n-1].Body)
		return 0
	}
	return fail("unknown command; commands: invoke, rules, deliveries, body (and, with flags only, the stack itself)")
}

func readArg(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// send makes one request to the stack, bounded in time.
func send(method, url string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("%v (is the stack up? make stack)", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return answer, resp.StatusCode, err
}

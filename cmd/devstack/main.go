// Command devstack keeps a local oncely stack up for operators to try
// oncelyctl on: the records table in moto (with the template's triage
// index), the real bootstrap under the Lambda Runtime Interface Emulator,
// and a fake downstream whose bugs and outages are switched on and off
// over HTTP. It prints how to reach them, writes the variables to export
// into a file, and stops everything at Ctrl-C.
//
// `make stack` builds it and runs it under tools/with-moto.sh. It is a
// development tool: it links test support (the emulator driver and the
// fake webhook) and is never deployed.
package main

import (
	"context"
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
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/eventkey"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/rie"
)

// The stack's names: what the template would call them in a stack named
// "oncely" (the namespace is "${AWS::StackName}-notify").
const (
	table     = "oncely-records"
	namespace = "oncely-notify"
)

func main() {
	rieBin := flag.String("rie", ".tools/bin/aws-lambda-rie", "path to aws-lambda-rie")
	boot := flag.String("bootstrap", ".tools/host/bootstrap", "the bootstrap built for this machine")
	dir := flag.String("dir", ".tools/stack", "where the env file and the function's log go")
	bin := flag.String("bin", "bin", "where oncelyctl is (added to PATH in the env file)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *rieBin, *boot, *dir, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, rieBin, boot, dir, bin string) error {
	moto := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if moto == "" {
		return errors.New("AWS_ENDPOINT_URL_DYNAMODB is not set: run `make stack`, which starts moto")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	client := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &moto})
	if _, err := ddbstore.CreateTable(ctx, client, table); err != nil {
		return err
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

	logPath := filepath.Join(dir, "function.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	emu, err := rie.Start(rie.Options{RIE: rieBin, Bootstrap: boot, Log: logFile, Env: rie.Local{
		DynamoDB: moto, Table: table, DownstreamURL: webhook + "/webhook", Name: "oncely-QueueFunction", TimeoutSeconds: 30,
		Extra: []string{
			"IDEMPOTENCY_NAMESPACE=" + namespace,
			"IDEMPOTENCY_KEY_JMESPATH=" + eventkey.DefaultExpression,
			"NOTIFY_TIMEOUT=5s",
			// No queue here: a delivery is an invoke, so there is no message
			// visibility to change.
			"SQS_BACKOFF=off",
		},
	}.Env()})
	if err != nil {
		return err
	}
	defer emu.Stop()
	functionURL := strings.TrimSuffix(emu.URL, "/2015-03-31/functions/function/invocations")

	absBin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	envFile := filepath.Join(dir, "env")
	env := fmt.Sprintf(`# The oncely local stack (make stack). In another terminal: source %[1]s
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
# moto serves DynamoDB and STS: oncelyctl and the aws CLI talk to it.
export AWS_ENDPOINT_URL=%[2]s
# The function's own variables, which oncelyctl reads as the function does.
export IDEMPOTENCY_TABLE=%[3]s IDEMPOTENCY_NAMESPACE=%[4]s IDEMPOTENCY_KEY_JMESPATH=%[5]q
# The function under the Lambda emulator: aws lambda invoke --endpoint-url "$ONCELY_FUNCTION" --function-name function ...
export ONCELY_FUNCTION=%[6]s
# The fake downstream: PUT/DELETE /rules, GET /deliveries.
export ONCELY_WEBHOOK=%[7]s
export PATH=%[8]q:"$PATH"
`, envFile, moto, table, namespace, eventkey.DefaultExpression, functionURL, webhook, absBin)
	if err := os.WriteFile(envFile, []byte(env), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, `oncely local stack
  DynamoDB and STS (moto)   %s   table %s, namespace %s
  the function (emulator)   %s   its log: %s
  the fake downstream       %s   PUT/DELETE /rules, GET /deliveries

In another terminal:
  source %s
  oncelyctl config

Then follow the walkthrough in docs/operating.md. Ctrl-C stops everything.
`, moto, table, namespace, functionURL, logPath, webhook, envFile)
	<-ctx.Done()
	fmt.Fprintln(w, "\nstopping: the emulator and the function, the fake downstream, then moto")
	return os.Remove(envFile)
}

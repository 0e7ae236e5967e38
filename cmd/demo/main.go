// Command demo runs the main job locally: the real bootstrap under the AWS
// Lambda Runtime Interface Emulator, against a moto DynamoDB and a local
// webhook receiver that counts deliveries per Idempotency-Key. It sends the
// sample events (events/) and a few scripted failures, one invocation at a
// time, and prints what happened to each message.
//
// `make demo` builds everything, starts moto, and runs this.
package main

import (
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
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/testing/fakewebhook"
	"github.com/oncely/oncely/internal/testing/rie"
)

func main() {
	rieBin := flag.String("rie", ".tools/bin/aws-lambda-rie", "path to aws-lambda-rie")
	boot := flag.String("bootstrap", "bin/bootstrap", "path to the bootstrap built for this machine")
	eventsDir := flag.String("events", "events", "directory of sample events")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *rieBin, *boot, *eventsDir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// row is one line of the report.
type row struct {
	step, message, key, outcome string
}

func run(ctx context.Context, w io.Writer, rieBin, boot, eventsDir string) error {
	endpoint := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
	if endpoint == "" {
		return errors.New("AWS_ENDPOINT_URL_DYNAMODB is not set: run `make demo`, which starts moto")
	}
	table := fmt.Sprintf("oncely-demo-%d", time.Now().UnixNano())
	client := dynamodb.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), BaseEndpoint: &endpoint})
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

	emu, err := rie.Start(rie.Options{RIE: rieBin, Bootstrap: boot, Env: rie.Local{
		DynamoDB: endpoint, Table: table, DownstreamURL: "http://" + l.Addr().String() + "/webhook", Name: "oncely-demo", TimeoutSeconds: 10,
		Extra: []string{"AWS_LAMBDA_LOG_FORMAT=JSON", "NOTIFY_TIMEOUT=2s", "IDEMPOTENCY_BACKOFF_BASE=20ms", "IDEMPOTENCY_BACKOFF_MAX=200ms"},
	}.Env()})
	if err != nil {
		return err
	}
	defer emu.Stop()
	fmt.Fprintf(w, "moto DynamoDB at %s, table %s\nwebhook receiver at http://%s\nbootstrap under the Runtime Interface Emulator at %s\n\n", endpoint, table, l.Addr(), emu.URL)

	var rows []row
	logged := 0
	// invoke sends one payload and reads each record's outcome from the
	// function's own log lines (the emulator passes them through).
	invoke := func(step string, payload []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		body, err := emu.Invoke(ctx, payload)
		if err != nil {
			return err
		}
		var api events.APIGatewayV2HTTPResponse
		if json.Unmarshal(body, &api) == nil && api.StatusCode != 0 {
			outcome := fmt.Sprintf("HTTP %d", api.StatusCode)
			if api.Headers["Idempotent-Replayed"] == "true" {
				outcome += ", Idempotent-Replayed: true"
			}
			if api.Headers["Retry-After"] != "" {
				outcome += ", Retry-After: " + api.Headers["Retry-After"]
			}
			rows = append(rows, row{step: step, message: "POST /events", key: "8e03978e-40d5-43e8-bc93-6894a57f9324", outcome: outcome})
			return nil
		}
		if !strings.Contains(string(body), "batchItemFailures") && !strings.Contains(string(body), "{}") {
			return fmt.Errorf("%s: the function answered %s", step, body)
		}
		time.Sleep(50 * time.Millisecond) // let the log lines arrive
		lines := strings.Split(emu.Log(), "\n")
		for _, line := range lines[logged:] {
			i := strings.IndexByte(line, '{')
			if i < 0 {
				continue
			}
			var rec struct {
				Message, MessageID, Key, Outcome, Code string
				Attempts                               int
			}
			if json.Unmarshal([]byte(line[i:]), &rec) != nil || rec.Message != "record" {
				continue
			}
			rows = append(rows, row{step: step, message: short(rec.MessageID), key: rec.Key, outcome: describe(rec.Outcome, rec.Code, rec.Attempts)})
		}
		logged = len(lines) - 1
		return nil
	}
	sample := func(name string) ([]byte, error) { return os.ReadFile(eventsDir + "/" + name) }

	steps := []struct {
		name    string
		payload func() ([]byte, error)
		before  func()
	}{
		{"1 duplicate batch", func() ([]byte, error) { return sample("sqs-duplicate.json") }, nil},
		{"2 same batch again", func() ([]byte, error) { return sample("sqs-duplicate.json") }, nil},
		{"3 downstream 503", func() ([]byte, error) { return batch("d-503", `{"id":"release-50","action":"notify"}`) },
			func() { down.Script("evt:release-50:notify", fakewebhook.Reply{Status: 503, RetryAfter: "30"}) }},
		{"4 redelivery", func() ([]byte, error) { return batch("d-503", `{"id":"release-50","action":"notify"}`) }, nil},
		{"5 downstream 404", func() ([]byte, error) { return batch("d-404", `{"id":"release-51","action":"notify"}`) },
			func() { down.Script("evt:release-51:notify", fakewebhook.Reply{Status: 404}) }},
		{"6 redelivery", func() ([]byte, error) { return batch("d-404", `{"id":"release-51","action":"notify"}`) }, nil},
		{"7 poison batch", func() ([]byte, error) { return sample("sqs-poison.json") }, nil},
		{"8 FIFO batch", func() ([]byte, error) { return sample("sqs-fifo.json") }, nil},
		{"9 API request", func() ([]byte, error) { return sample("api-request.json") }, nil},
		{"10 API request again", func() ([]byte, error) { return sample("api-request.json") }, nil},
		{"11 API, same key, new body", func() ([]byte, error) {
			b, err := sample("api-request.json")
			return []byte(strings.Replace(string(b), `"body": "{\"id\":\"release-42\"`, `"body": "{\"id\":\"release-99\"`, 1)), err
		}, nil},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		payload, err := s.payload()
		if err != nil {
			return err
		}
		if err := invoke(s.name, payload); err != nil {
			return err
		}
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tmessage\tkey\twhat happened")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.step, r.message, r.key, r.outcome)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ndeliveries the webhook receiver saw, per Idempotency-Key:")
	counts := down.Counts()
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%d\n", k, counts[k])
	}
	return tw.Flush()
}

func batch(id, body string) ([]byte, error) {
	return json.Marshal(events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: id, ReceiptHandle: "rh-" + id, Body: body, EventSource: "aws:sqs",
		EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:oncely-events", AWSRegion: "us-east-1",
	}}})
}

func short(id string) string {
	if len(id) > 13 {
		return id[:8] + "…"
	}
	return id
}

func describe(outcome, code string, attempts int) string {
	switch outcome {
	case "executed":
		return fmt.Sprintf("executed (attempt %d)", attempts)
	case "replayed":
		return "replayed, downstream not called"
	case "permanent":
		return "failed for good (" + code + "), recorded and acknowledged"
	case "poison":
		return "poison (" + code + "), noted and acknowledged"
	case "transient":
		return "retry later (" + code + "), back to the queue"
	case "in_progress":
		return "in progress elsewhere, back to the queue"
	case "skipped":
		return "not started (" + code + "), back to the queue"
	default:
		return outcome + " " + code
	}
}

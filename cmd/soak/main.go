// Command soak runs the chaos soak (internal/testing/soak): N events sent
// twice each to the template's queues, processed by the real bootstrap
// under the Runtime Interface Emulator through the local event source
// mapping, with DynamoDB faults, a chaotic webhook with a full outage, and
// runtime kills; then it checks every event and writes RELIABILITY.md.
// `make soak` builds what it needs, starts moto's DynamoDB and SQS, and
// runs this. It exits 1 when an invariant broke, after writing the report
// with the evidence.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/soak"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

func main() {
	events := flag.Int("events", 5000, "events to send (each twice)")
	seed := flag.Uint64("seed", 12, "seed of the producer, the faults and the kills")
	rieBin := flag.String("rie", ".tools/bin/aws-lambda-rie", "path to aws-lambda-rie")
	boot := flag.String("bootstrap", ".tools/host/bootstrap", "the bootstrap built for this machine")
	tpl := flag.String("template", "template.yaml", "the SAM template")
	out := flag.String("out", "RELIABILITY.md", "report file ('' writes none)")
	flag.Parse()
	ddb, sqs := os.Getenv(ddblocal.EnvMoto), sqslocal.EndpointFromEnv()
	if ddb == "" || sqs == "" {
		fmt.Fprintf(os.Stderr, "soak: %s and %s are not set: run `make soak`, which starts moto\n", ddblocal.EnvMoto, sqslocal.EnvEndpoint)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := soak.Default(*events)
	cfg.Seed, cfg.RIE, cfg.Bootstrap, cfg.Template, cfg.DynamoDB, cfg.SQS = *seed, *rieBin, *boot, *tpl, ddb, sqs
	cfg.Log = os.Stderr
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	fmt.Print(rep.Summary())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(rep.Markdown(machine())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
		fmt.Println("wrote", *out)
	}
	if !rep.OK() {
		fmt.Fprint(os.Stderr, rep.Failures())
		os.Exit(1)
	}
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

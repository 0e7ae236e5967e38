package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/oncely/oncely/internal/testing/ddblocal"
	"github.com/oncely/oncely/internal/testing/soak"
	"github.com/oncely/oncely/internal/testing/sqslocal"
)

// TestSoak is the short chaos soak (`make soak` runs the long one): 300
// events, each sent twice to the template's queues, through the event
// source mapping runner and the real bootstrap, with DynamoDB faults, a
// chaotic webhook with one full outage, and runtime kills. It fails on any
// lost event, any message deleted before its record was final, any
// duplicate delivery no documented window explains, and any FIFO group
// delivered out of order, printing the evidence for each.
func TestSoak(t *testing.T) {
	start(t, 1) // skips (or fails under IDEM_REQUIRE_E2E) without the emulator and moto
	n := 300    // about 60 s under -race; IDEM_SOAK_EVENTS runs another size
	if v := os.Getenv("IDEM_SOAK_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatalf("IDEM_SOAK_EVENTS=%q: want a number of events", v)
		}
	}
	cfg := soak.Default(n)
	cfg.RIE, cfg.Bootstrap, cfg.Template = os.Getenv(envRIE), bootstrap, "../../template.yaml"
	cfg.DynamoDB, cfg.SQS = os.Getenv(ddblocal.EnvMotoSoak), sqslocal.EndpointFromEnv()
	if cfg.DynamoDB == "" {
		cfg.DynamoDB = os.Getenv(ddblocal.EnvMoto)
	}
	cfg.Log = testLog{t}
	rep, err := soak.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep.Summary())
	if !rep.OK() {
		t.Errorf("the soak broke %d invariants:\n%s", len(rep.Violations), rep.Failures())
	}
	if rep.ReachedDLQ == 0 || rep.Redriven == 0 {
		t.Errorf("no event reached a DLQ (%d) or was redriven (%d): the outage did not outlast the retry window, so the redrive went untested", rep.ReachedDLQ, rep.Redriven)
	}
	if rep.Kills == 0 || rep.MidActionKills == 0 {
		t.Errorf("runtimes killed %d, of which right after the webhook accepted %d: the crash window went untested", rep.Kills, rep.MidActionKills)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

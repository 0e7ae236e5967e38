package samtemplate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/testing/samtemplate"
)

const sample = `
Parameters:
  Conc: {Type: Number, Default: 7}
Globals:
  Function:
    Timeout: 12
    Environment:
      Variables: {SHARED: "yes", OVERRIDDEN: "global"}
Resources:
  Src:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 90
      MessageRetentionPeriod: 600
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt Dead.Arn
        maxReceiveCount: 6
  Dead:
    Type: AWS::SQS::Queue
  Fifo:
    Type: AWS::SQS::Queue
    Properties: {FifoQueue: true}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          LITERAL: "3"
          FROM_PARAM: !Ref Conc
          COMPUTED: !Sub "${AWS::StackName}-x"
          OVERRIDDEN: local
      Events:
        A:
          Type: SQS
          Properties:
            Queue: !GetAtt Src.Arn
            BatchSize: 4
            MaximumBatchingWindowInSeconds: 2
            FunctionResponseTypes: [ReportBatchItemFailures]
            ScalingConfig: {MaximumConcurrency: 3}
        B:
          Type: SQS
          Properties:
            Queue: !GetAtt Fifo.Arn
        Api:
          Type: HttpApi
`

func TestParseReadsTheSettingsALocalRunNeeds(t *testing.T) {
	tpl, err := samtemplate.Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	wantQueues := map[string]samtemplate.Queue{
		"Src":  {ID: "Src", VisibilityTimeout: 90 * time.Second, Retention: 10 * time.Minute, MaxReceiveCount: 6, DLQ: "Dead"},
		"Dead": {ID: "Dead", VisibilityTimeout: samtemplate.DefaultVisibilityTimeout, Retention: samtemplate.DefaultRetention},
		"Fifo": {ID: "Fifo", FIFO: true, VisibilityTimeout: samtemplate.DefaultVisibilityTimeout, Retention: samtemplate.DefaultRetention},
	}
	if diff := cmp.Diff(wantQueues, tpl.Queues); diff != "" {
		t.Errorf("queues (-want +got):\n%s", diff)
	}
	wantSources := []samtemplate.EventSource{
		{Function: "Fn", Name: "A", Queue: "Src", BatchSize: 4, BatchingWindow: 2 * time.Second, MaximumConcurrency: 3, ReportBatchItemFailures: true},
		{Function: "Fn", Name: "B", Queue: "Fifo", BatchSize: samtemplate.DefaultBatchSize, MaximumConcurrency: samtemplate.DefaultMaximumConcurrency},
	}
	if diff := cmp.Diff(wantSources, tpl.Sources); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}
	fn := tpl.Functions["Fn"]
	if fn.Timeout != 12*time.Second {
		t.Errorf("timeout %v; want 12s from Globals", fn.Timeout)
	}
	wantEnv := map[string]string{"SHARED": "yes", "OVERRIDDEN": "local", "LITERAL": "3", "FROM_PARAM": "7"}
	if diff := cmp.Diff(wantEnv, fn.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"COMPUTED"}, fn.Computed); diff != "" {
		t.Errorf("computed (-want +got):\n%s", diff)
	}
}

func TestParseRefusesWhatItCannotRead(t *testing.T) {
	for name, c := range map[string]struct{ from, to, want string }{
		"queue not in the template": {"Queue: !GetAtt Src.Arn", "Queue: !GetAtt Elsewhere.Arn", "Elsewhere"},
		"batch size not a number":   {"BatchSize: 4", "BatchSize: !Ref Nope", "BatchSize"},
		"DLQ not in the template":   {"!GetAtt Dead.Arn", "!GetAtt Gone.Arn", "Gone"},
		"maxReceiveCount zero":      {"maxReceiveCount: 6", "maxReceiveCount: 0", "maxReceiveCount"},
	} {
		t.Run(name, func(t *testing.T) {
			broken := strings.Replace(sample, c.from, c.to, 1)
			if broken == sample {
				t.Fatalf("the test's replacement %q matched nothing", c.from)
			}
			_, err := samtemplate.Parse([]byte(broken))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want one naming %q", err, c.want)
			}
		})
	}
}

func TestTheProjectTemplateHasQueuesWithDLQs(t *testing.T) {
	tpl, err := samtemplate.Load("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Two functions of one bootstrap: local runs give API requests the API
	// function's timeout and environment, and batches the queue function's.
	api, queue := tpl.Functions[tpl.API], tpl.Functions[tpl.Sources[0].Function]
	if api.ID == "" || api.ID == queue.ID || api.Timeout >= queue.Timeout || api.Env["NOTIFY_TIMEOUT"] == queue.Env["NOTIFY_TIMEOUT"] {
		t.Errorf("API function %q (timeout %v, NOTIFY_TIMEOUT %q), queue function %q (%v, %q); want two functions, the API's with shorter times",
			api.ID, api.Timeout, api.Env["NOTIFY_TIMEOUT"], queue.ID, queue.Timeout, queue.Env["NOTIFY_TIMEOUT"])
	}
	if len(tpl.Sources) == 0 {
		t.Fatal("no SQS event sources in template.yaml")
	}
	for _, s := range tpl.Sources {
		q := tpl.Queues[s.Queue]
		if q.DLQ == "" || q.MaxReceiveCount == 0 {
			t.Errorf("%s: queue %s has no redrive policy; the runner and the soak need one", s.Name, s.Queue)
		}
		if q.FIFO && s.BatchingWindow != 0 {
			t.Errorf("%s: a FIFO source with a batching window %v", s.Name, s.BatchingWindow)
		}
	}
}

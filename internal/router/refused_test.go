package router_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// TestStoreRefusalsAreLoggedAndCounted: a store call refused for a reason
// a retry will not fix (here the table is gone) is logged at ERROR with the
// table and DynamoDB's error code, and counted as store_refused, on both
// paths; nothing is acknowledged.
func TestStoreRefusalsAreLoggedAndCounted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &h.table}); err != nil {
		t.Fatal(err)
	}
	// An event (the reservation is refused) and a poison message (its note is).
	if f := failed(h.sqs(ctx, false, msg{id: "m1", body: bodyA}, msg{id: "m2", body: "not json"})); len(f) != 2 {
		t.Fatalf("failures %v; want both back to the queue: nothing was stored", f)
	}
	if resp := h.api(ctx, apiRequest(t, "refused-0001", bodyA)); resp.StatusCode != 500 || problemCode(t, resp) != "STORE_MISCONFIGURED" {
		t.Errorf("API: %d %s; want 500 STORE_MISCONFIGURED", resp.StatusCode, resp.Body)
	}
	var refusals int
	for _, line := range strings.Split(strings.TrimSpace(h.logs.String()), "\n") {
		var l struct {
			Level string
			Msg   string
			Store struct {
				Table     string `json:"table"`
				ErrorCode string `json:"error_code"`
			} `json:"store"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Store.Table == "" {
			continue
		}
		refusals++
		if l.Level != "ERROR" || l.Store.Table != h.table || l.Store.ErrorCode != "ResourceNotFoundException" {
			t.Errorf("log line %s; want ERROR naming the table %s and ResourceNotFoundException", line, h.table)
		}
	}
	if refusals != 3 {
		t.Errorf("%d log lines name the table and the error code; want 3 (the reservation on each path, the note):\n%s", refusals, h.logs.String())
	}
	docs := h.metrics.String()
	if !strings.Contains(docs, `"Source":"sqs"`) || strings.Count(docs, `"store_refused":2`) != 1 || strings.Count(docs, `"store_refused":1`) != 1 {
		t.Errorf("metrics %s; want store_refused 2 on the SQS invocation and 1 on the API's", docs)
	}
}

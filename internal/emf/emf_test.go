package emf_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/emf"
)

// TestDocumentShape checks one document against the EMF specification: a
// root _aws member with an epoch-ms Timestamp and one directive naming the
// namespace, the dimension set and every metric; each metric and dimension
// value a root member; zeros written, so alarms always see a value.
func TestDocumentShape(t *testing.T) {
	var c emf.Counts
	c.Add("executed")
	c.Add("executed")
	c.Add("poison")
	var buf bytes.Buffer
	at := time.UnixMilli(1796083200123)
	err := emf.Write(&buf, emf.Document{Namespace: "oncely", Dimensions: map[string]string{"FunctionName": "fn", "Source": "sqs"},
		Names: []string{"executed", "poison", "transient"}, Counts: &c, Duration: 12345 * time.Microsecond, At: at})
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 || buf.Bytes()[buf.Len()-1] != '\n' {
		t.Fatalf("got %d lines; want one JSON line", n)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"FunctionName": "fn", "Source": "sqs", "executed": 2.0, "poison": 1.0, "transient": 0.0, "duration": 12.345,
		"_aws": map[string]any{
			"Timestamp": 1796083200123.0,
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  "oncely",
				"Dimensions": []any{[]any{"FunctionName", "Source"}},
				"Metrics": []any{
					map[string]any{"Name": "executed", "Unit": "Count"},
					map[string]any{"Name": "poison", "Unit": "Count"},
					map[string]any{"Name": "transient", "Unit": "Count"},
					map[string]any{"Name": "duration", "Unit": "Milliseconds"},
				},
			}},
		},
	}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Errorf("document (-want +got):\n%s", diff)
	}
}

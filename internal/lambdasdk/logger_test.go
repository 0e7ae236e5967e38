package lambdasdk

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/aws/smithy-go/logging"
)

// The SDK's warnings reach the function's log as JSON lines of its own
// logger, at the SDK's level.
func TestSDKWarningsAreJSONLines(t *testing.T) {
	var buf bytes.Buffer
	l := Logger(slog.New(slog.NewJSONHandler(&buf, nil)))
	l.Logf(logging.Warn, "failed to discard remaining HTTP response body, this may affect connection reuse: %v", "use of closed network connection")
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("not one JSON line: %q (%v)", buf.String(), err)
	}
	if line["level"] != "WARN" || line["source"] != "aws-sdk" || line["msg"] != "failed to discard remaining HTTP response body, this may affect connection reuse: use of closed network connection" {
		t.Errorf("line %v; want level WARN, source aws-sdk and the SDK's message", line)
	}
}

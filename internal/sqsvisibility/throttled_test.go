package sqsvisibility_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqsvisibility"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// changeAnswering is a local server speaking SQS's JSON protocol that
// answers every ChangeMessageVisibilityBatch with status and body.
func changeAnswering(t *testing.T, status int, body string) *sqs.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return sqs.NewFromConfig(ddblocal.Config(srv.URL, nil), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
}

// SQS's RequestThrottled is modelled as the client's fault, for the whole
// call and for one entry; it is throttling all the same (it was permanent
// here before awserr). Other refusals stay permanent, and a denial names
// the permission.
func TestChangeRefusalsAreClassifiedByTheTranslator(t *testing.T) {
	entryFailed := func(code string, sender bool) string {
		return fmt.Sprintf(`{"Successful":[],"Failed":[{"Id":"0","Code":%q,"Message":"injected","SenderFault":%v}]}`, code, sender)
	}
	for _, tt := range []struct {
		name, body string
		status     int
		want       idem.Class
		text       string
	}{
		{"call RequestThrottled", `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"injected"}`, 400, idem.ClassTransient, "RequestThrottled"},
		{"call AccessDenied", `{"__type":"AccessDeniedException","message":"injected"}`, 400, idem.ClassPermanent, "sqs:ChangeMessageVisibility"},
		{"entry RequestThrottled", entryFailed("RequestThrottled", true), 200, idem.ClassTransient, "RequestThrottled"},
		{"entry ReceiptHandleIsInvalid", entryFailed("ReceiptHandleIsInvalid", true), 200, idem.ClassPermanent, "ReceiptHandleIsInvalid"},
		{"entry InternalError", entryFailed("InternalError", false), 200, idem.ClassTransient, "InternalError"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			failed := sqsvisibility.New(changeAnswering(t, tt.status, tt.body)).ChangeVisibility(context.Background(), []sqsvisibility.Change{
				{QueueARN: "arn:aws:sqs:us-east-1:123456789012:q", MessageID: "m1", ReceiptHandle: "h", Timeout: time.Second},
			})
			err := failed["m1"]
			if got := idem.Classify(err); err == nil || got != tt.want || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("got %v (%v), want %v naming %q", got, err, tt.want, tt.text)
			}
		})
	}
}

package sqssend_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/sqssend"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// sqsAnswering is a local server speaking SQS's JSON protocol that
// answers every call with status and the error shape typ.
func sqsAnswering(t *testing.T, status int, typ string) *sqs.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"__type":%q,"message":"injected"}`, typ)
	}))
	t.Cleanup(srv.Close)
	return sqs.NewFromConfig(ddblocal.Config(srv.URL, nil), func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
}

// SQS's RequestThrottled is modelled as the client's fault; it is
// throttling all the same (it was permanent here before awserr), and a
// denial still names the permission.
func TestSendRefusalsAreClassifiedByTheTranslator(t *testing.T) {
	for _, tt := range []struct {
		typ  string
		want idem.Class
		text string
	}{
		{"com.amazonaws.sqs#RequestThrottled", idem.ClassTransient, "RequestThrottled"},
		{"com.amazonaws.sqs#QueueDoesNotExist", idem.ClassPermanent, "QueueDoesNotExist"},
		{"AccessDeniedException", idem.ClassPermanent, "sqs:SendMessage"},
		{"com.amazonaws.sqs#KmsAccessDenied", idem.ClassPermanent, "kms:GenerateDataKey"},
	} {
		t.Run(tt.typ, func(t *testing.T) {
			_, err := sqssend.New(sqsAnswering(t, 400, tt.typ), "https://sqs.us-east-1.amazonaws.com/123456789012/q").Send(context.Background(), []byte("{}"), nil)
			if got := idem.Classify(err); got != tt.want || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("got %v (%v), want %v naming %q", got, err, tt.want, tt.text)
			}
		})
	}
}

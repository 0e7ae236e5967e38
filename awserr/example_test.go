package awserr_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/awserr"
)

// An action's SQS call is throttled. Unmarked, the engine would store the
// error as a permanent failure; the translator says it is transient.
func Example() {
	// A local stand-in for SQS that throttles every call.
	throttling := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"slow down"}`)
	}))
	defer throttling.Close()
	client := sqs.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("id", "secret", ""),
		BaseEndpoint: aws.String(throttling.URL),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
	})

	_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(throttling.URL + "/123456789012/orders"), MessageBody: aws.String(`{"order":1}`),
	})
	fmt.Println("unmarked:", oncely.Classify(err))
	fmt.Println("awserr.Classify:", awserr.Classify(err))
	fmt.Println("awserr.Mark:", oncely.Classify(awserr.Mark(err)))

	// The one line that applies it to every error an action leaves unmarked.
	_ = oncely.Options{Classify: awserr.Classify}
	// Output:
	// unmarked: unknown
	// awserr.Classify: transient
	// awserr.Mark: transient
}

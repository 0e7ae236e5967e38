package awserr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/awserr"
)

// reply is what the local server answers: an AWS JSON error (status and
// __type), or one of the ways a request ends without a reply.
type reply struct {
	status int
	typ    string          // the error's shape, e.g. com.amazonaws.sqs#RequestThrottled
	hang   bool            // read the request, then never answer (the client times out)
	reset  bool            // read the request, then reset the connection
	got    chan<- struct{} // if set, told when the request has been read
}

// server starts a local server speaking the AWS JSON protocol (DynamoDB's
// and SQS's) that gives r to every request.
func server(t *testing.T, r reply) string {
	t.Helper()
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.ReadAll(req.Body)
		if r.got != nil {
			r.got <- struct{}{}
		}
		switch {
		case r.hang:
			select {
			case <-gone:
			case <-req.Context().Done():
			}
			return
		case r.reset:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.(*net.TCPConn).SetLinger(0) // close with a RST
			conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(r.status)
		fmt.Fprintf(w, `{"__type":%q,"message":"injected"}`, r.typ)
	}))
	t.Cleanup(func() { close(gone); srv.Close() })
	return srv.URL
}

// config is an SDK configuration for endpoint that makes one attempt per
// call (the SDK's retries would only repeat the same answer) and whose
// HTTP client gives up waiting for a reply header after 200 ms.
func config(endpoint string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) aws.Config {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
		HTTPClient: &http.Client{Transport: &http.Transport{
			DialContext: dial, ResponseHeaderTimeout: 200 * time.Millisecond, DisableKeepAlives: true,
		}},
	}
}

func putItem(ctx context.Context, cfg aws.Config) error {
	_, err := dynamodb.NewFromConfig(cfg).PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String("orders"), Item: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "o-1"}},
	})
	return err
}

func getItem(ctx context.Context, cfg aws.Config) error {
	_, err := dynamodb.NewFromConfig(cfg).GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String("orders"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "o-1"}},
	})
	return err
}

func sendMessage(ctx context.Context, cfg aws.Config) error {
	_, err := sqs.NewFromConfig(cfg).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String("https://sqs.us-east-1.amazonaws.com/123456789012/q"), MessageBody: aws.String("{}")})
	return err
}

// closedPort is an address nothing listens on: its dial is refused.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// noDNS dials through a resolver that reaches no DNS server: the name
// does not resolve, and net reports it as a *net.DNSError.
func noDNS(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server here")
	}}}
	return d.DialContext(ctx, network, addr)
}

// Every row is an error the SDK built itself, from a local server's answer
// or from what became of its request. Each is checked three ways: the
// class Classify gives, the class of Mark's error and whether Mark marked
// it sent.
func TestRealSDKErrorsAreClassified(t *testing.T) {
	const (
		unknown   = oncely.ClassUnknown
		transient = oncely.ClassTransient
		permanent = oncely.ClassPermanent
		outcome   = oncely.ClassOutcomeUnknown
	)
	tests := []struct {
		name string
		call func(t *testing.T) error
		// want is Classify's class; mark the class of Mark's error; sent
		// whether Mark marked it sent.
		want, mark oncely.Class
		sent       bool
	}{
		// The SDK models it as the client's fault: throttling must be
		// decided first, or it is permanent (the bug of sqssend and
		// sqsvisibility before the translator).
		{"SQS RequestThrottled", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.sqs#RequestThrottled"}), nil))
		}, transient, transient, false},
		{"DynamoDB ThrottlingException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ThrottlingException"}), nil))
		}, transient, transient, false},
		{"DynamoDB ProvisionedThroughputExceededException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}), nil))
		}, transient, transient, false},
		// Throttling the SDK models as the client's fault, unknown to its retryer.
		{"SQS KmsThrottled", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.sqs#KmsThrottled"}), nil))
		}, transient, transient, false},
		{"DynamoDB TransactionConflictException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#TransactionConflictException"}), nil))
		}, transient, transient, false},
		// Expired credentials: the request was refused unapplied, and a
		// later attempt with fresh ones succeeds. Permanent would store
		// the failure and acknowledge the event.
		{"DynamoDB ExpiredTokenException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ExpiredTokenException"}), nil))
		}, transient, transient, false},
		{"SQS ExpiredToken", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{status: 400, typ: "ExpiredToken"}), nil))
		}, transient, transient, false},
		// The first send of the same transaction is still being applied.
		{"DynamoDB TransactionInProgressException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#TransactionInProgressException"}), nil))
		}, outcome, transient, true},
		{"DynamoDB 500 InternalServerError", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 500, typ: "com.amazonaws.dynamodb.v20120810#InternalServerError"}), nil))
		}, transient, transient, false},
		{"SQS 503 with an unmodelled code", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{status: 503, typ: "ServiceUnavailable"}), nil))
		}, transient, transient, false},
		{"refused dial", func(t *testing.T) error {
			return putItem(context.Background(), config(closedPort(t), nil))
		}, transient, transient, false},
		{"DNS failure", func(t *testing.T) error {
			return sendMessage(context.Background(), config("http://sqs.example.invalid", noDNS))
		}, transient, transient, false},
		{"timeout after the write", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{hang: true}), nil))
		}, outcome, transient, true},
		{"context ended after the write", func(t *testing.T) error {
			// The server has read the request, then the caller gives up.
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan struct{}, 1)
			cfg := config(server(t, reply{hang: true, got: got}), nil)
			cfg.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			go func() { <-got; cancel() }()
			return sendMessage(ctx, cfg)
		}, outcome, transient, true},
		{"reset after the write", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{reset: true}), nil))
		}, outcome, transient, true},
		{"timeout of a read", func(t *testing.T) error {
			return getItem(context.Background(), config(server(t, reply{hang: true}), nil))
		}, transient, transient, false},
		{"DynamoDB ValidationException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ValidationException"}), nil))
		}, permanent, permanent, false},
		{"DynamoDB AccessDeniedException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#AccessDeniedException"}), nil))
		}, permanent, permanent, false},
		{"DynamoDB ResourceNotFoundException", func(t *testing.T) error {
			return getItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"}), nil))
		}, permanent, permanent, false},
		{"SQS QueueDoesNotExist", func(t *testing.T) error {
			return sendMessage(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.sqs#QueueDoesNotExist"}), nil))
		}, permanent, permanent, false},
		{"a parameter the SDK refuses", func(t *testing.T) error {
			_, err := dynamodb.NewFromConfig(config(closedPort(t), nil)).PutItem(context.Background(), &dynamodb.PutItemInput{})
			return err
		}, permanent, permanent, false},
		{"DynamoDB ConditionalCheckFailedException", func(t *testing.T) error {
			return putItem(context.Background(), config(server(t, reply{status: 400, typ: "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}), nil))
		}, unknown, unknown, false},
		{"no AWS call", func(t *testing.T) error { return context.DeadlineExceeded }, unknown, unknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(t)
			if err == nil {
				t.Fatal("the call succeeded; want an error")
			}
			if got := awserr.Classify(err); got != tt.want {
				t.Errorf("Classify = %v, want %v (%T: %v)", got, tt.want, err, err)
			}
			marked := awserr.Mark(err)
			if tt.mark == unknown {
				if marked != err {
					t.Errorf("Mark = %v, want the error unchanged", marked)
				}
				return
			}
			if !errors.Is(marked, err) {
				t.Errorf("Mark lost the error: %v", marked)
			}
			if got, sent := oncely.Classify(marked), oncely.IsSent(marked); got != tt.mark || sent != tt.sent {
				t.Errorf("Mark: class %v sent %v, want %v sent %v (%v)", got, sent, tt.mark, tt.sent, err)
			}
		})
	}
}

// Package sdkhttp is the HTTP client test support gives the AWS SDK (the
// clients of sqslocal and ddblocal, and so every test, the demo and the
// soak): it hands the transport its own copy of each request body, so that
// the SDK never sends again a call the server has already answered.
//
// # Why
//
// Without it, on a busy machine, the SDK re-sends calls that the local
// servers served: a SendMessage twice (two messages where a test sent one),
// a ReceiveMessage twice (the first took the message, the second finds
// nothing), a CreateTable twice. The sequence, seen in the flake hunt and
// shown by TestServedCallIsNotSentAgainWhenTheWriteLoopLags:
//
//  1. net/http's write loop writes the request headers, then the body
//     straight to the socket. The server has the whole request.
//  2. The server answers. Client.Do returns on the response headers, and
//     smithy-go's ClientHandler closes the request body it built (a
//     safeReadCloser) right away, while the write loop, descheduled on a
//     busy CPU, has not yet made its last check on the body: a read for
//     bytes beyond Content-Length.
//  3. That check reads the closed body through its WriteTo, which returns
//     io.EOF as an error when closed (smithy-go's safeWriteToReadCloser).
//     The write loop takes it for a failed write and closes the connection.
//  4. The SDK, reading the response body, gets "use of closed network
//     connection", which its standard retryer retries (a string match,
//     aws-sdk-go-v2 #2737, #2949), and sends the call again.
//
// With a body of its own (an in-memory reader that no one else closes),
// the transport's check passes, and since net/http then knows the body is
// in memory it writes the headers and the body together after the check:
// nothing that can fail the write happens after the request has left.
//
// The function's own clients (cmd/handler) still use the SDK's client; on
// AWS the SDK's re-sends are part of the at-least-once behaviour the
// function is built for.
package sdkhttp

import (
	"bytes"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Client sends the SDK's requests through Next, each with a copy of its
// body. Request bodies are read whole into memory: fine for the JSON
// protocols of DynamoDB, SQS and Secrets Manager, not for streaming
// uploads.
type Client struct {
	Next aws.HTTPClient
}

// New returns a Client that sends through next.
func New(next aws.HTTPClient) *Client {
	return &Client{Next: next}
}

// Do sends req through Next with a body Next alone reads and closes. The
// SDK's body is read to its end and closed here; the SDK rewinds its
// stream before a retry, as it does for any attempt.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.Next.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	own := req.Clone(req.Context())
	own.Body = io.NopCloser(bytes.NewReader(body))
	own.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	own.ContentLength = int64(len(body))
	return c.Next.Do(own)
}

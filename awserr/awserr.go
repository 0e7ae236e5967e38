// Package awserr translates the errors of AWS SDK for Go v2 calls into
// oncely's error classes. It is for a team whose action calls an AWS
// service: an error nothing marks is stored as a permanent failure, so
// without it a throttled call would end its event for good. One line opts
// an engine in:
//
//	engine, err := oncely.New(store, oncely.Options{Classify: awserr.Classify})
//
// and an action that wants a different verdict for one call marks that
// error itself ([Mark], or oncely's markers), which the engine reads first.
// The project's own AWS clients (its DynamoDB store, its SQS and Secrets
// Manager clients) classify through this package too: it is the one place
// that decides what an AWS error means.
//
// # The rules, in order
//
//  1. Not its business: a conditional-check failure
//     (ConditionalCheckFailedException) is a result of your condition, and a
//     TransactionCanceledException holds one reason per item that only the
//     caller can read. Both are ClassUnknown: [Mark] leaves them unmarked.
//     DynamoDB's TransactionInProgressException says the first send of the
//     same transaction (its ClientRequestToken) is still being applied:
//     outcome unknown, as for a write with no reply (rule 5).
//  2. Throttling is transient: every code of the SDK retryer's
//     retry.DefaultThrottleErrorCodes (SQS's RequestThrottled among them),
//     its retry.DefaultRetryableErrorCodes (the server timed out waiting for
//     the request), any code that says it throttled (SQS's KmsThrottled),
//     and DynamoDB's TransactionConflictException. So are expired
//     credentials (ExpiredToken, ExpiredTokenException, RequestExpired):
//     the request was refused unapplied, and fresh credentials (a new
//     session, another execution environment) make the next attempt
//     succeed. This rule comes before the client-fault rule: the SDK
//     models these codes as the client's fault.
//  3. A refusal a retry will not change is permanent: validation, access
//     denied (KMS's too), not found, missing or invalid credentials, and any other
//     error the service marks as the client's fault or answers with a 4xx.
//     So is a request the SDK refused to build (a missing parameter).
//  4. The service's fault, a 5xx or a 429 is transient.
//  5. No reply. A request that never left (a refused or failed dial, a DNS
//     failure) is transient: nothing was sent. A read (an operation named
//     Get…, BatchGet…, Describe…, List…, Head…, Query or Scan) is transient
//     too: it has nothing to apply. Any other request that got no reply (a
//     timeout, a reset, a context that ended once it was written) may have
//     been applied: it is never plainly transient. [Classify] answers
//     ClassOutcomeUnknown, and [Mark] marks it sent (see below).
//
// An error that no AWS call produced (nothing in its chain is the SDK's:
// an OperationError, an API error, a response or send error) is not its
// business either: ClassUnknown, and the engine's own rules apply.
//
// # A request that may have been applied: Classify or Mark
//
// A [driver.Class] has no room for the sent mark, so [Classify] answers the
// safe class, ClassOutcomeUnknown: through Options.Classify, such a call
// ends its event with OUTCOME_UNKNOWN, stored and never run again (the same
// rule the DynamoDB store applies to its own writes). [Mark] marks the same
// error [driver.TransientSent] (oncely.TransientSent): no second attempt in this call, the key is
// held off for Options.SentPause, and a later delivery runs the action
// again. Return awserr.Mark(err) from an action whose AWS write is safe to
// repeat after that pause: one the service de-duplicates by your key (a
// ClientRequestToken, an SQS FIFO deduplication id), a conditional or
// otherwise idempotent write.
package awserr

import (
	"errors"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/oncely/oncely/driver"
)

// Classify returns the class of an AWS SDK error by the rules in the
// package doc: ClassTransient, ClassPermanent, ClassOutcomeUnknown (a
// request that got no reply after it may have been applied), or
// ClassUnknown (nil, a conditional-check failure, an error no AWS call
// produced). A mark already on err is not read: Classify judges the SDK's
// error. Its signature fits oncely.Options.Classify.
func Classify(err error) driver.Class {
	c, _ := verdict(err)
	return c
}

// Mark returns err marked with its class, for an action to return: a
// throttled or 5xx call is marked transient (retried in the call), a
// refusal permanent, and a request that may have been applied is marked
// sent ([driver.TransientSent]: retried on a later delivery, after
// Options.SentPause). An error already marked, nil, and an error Classify
// calls ClassUnknown are returned unchanged.
func Mark(err error) error {
	if err == nil {
		return nil
	}
	if _, marked := errors.AsType[*driver.ClassifiedError](err); marked {
		return err
	}
	switch c, sent := verdict(err); {
	case sent:
		return driver.TransientSent(err)
	case c == driver.ClassTransient:
		return driver.Transient(err)
	case c == driver.ClassPermanent:
		return driver.Permanent(err)
	}
	return err
}

// verdict is the one decision: the class, and whether it is a request that
// got no reply after it may have been applied (ClassOutcomeUnknown, sent).
func verdict(err error) (c driver.Class, sent bool) {
	if err == nil {
		return driver.ClassUnknown, false
	}
	if api, ok := errors.AsType[smithy.APIError](err); ok && api.ErrorCode() != "" {
		code := api.ErrorCode()
		switch {
		case notOurs[code]:
			return driver.ClassUnknown, false
		case code == "TransactionInProgressException":
			// DynamoDB: the first send of this very transaction (the same
			// ClientRequestToken) is still being applied.
			return driver.ClassOutcomeUnknown, true
		case isThrottle(code), expiredCodes[code]:
			return driver.ClassTransient, false
		case permanentCodes[code]:
			return driver.ClassPermanent, false
		}
		switch api.ErrorFault() {
		case smithy.FaultServer:
			return driver.ClassTransient, false
		case smithy.FaultClient:
			return driver.ClassPermanent, false
		}
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok {
		switch s := re.HTTPStatusCode(); {
		case s >= 500 || s == 429:
			return driver.ClassTransient, false
		case s >= 400:
			return driver.ClassPermanent, false
		}
	}
	if _, ok := errors.AsType[smithy.InvalidParamsError](err); ok {
		return driver.ClassPermanent, false // refused by the SDK: nothing was sent
	}
	if !fromAWSCall(err) {
		return driver.ClassUnknown, false
	}
	if notSent(err) {
		return driver.ClassTransient, false
	}
	if op, ok := errors.AsType[*smithy.OperationError](err); ok && isRead(op.OperationName) {
		return driver.ClassTransient, false
	}
	return driver.ClassOutcomeUnknown, true
}

// notOurs are the codes whose meaning is the caller's: a condition it set.
var notOurs = map[string]bool{
	"ConditionalCheckFailedException": true,
	"TransactionCanceledException":    true,
}

// isThrottle reports whether the SDK's retryer treats code as throttling
// or as retryable, and its friends: any code that says it throttled (SQS's
// KmsThrottled and Kinesis' KMSThrottlingException, which the SDK models as
// the client's fault and its retryer does not know), and DynamoDB's
// TransactionConflictException.
func isThrottle(code string) bool {
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
		return true
	}
	if _, ok := retry.DefaultRetryableErrorCodes[code]; ok {
		return true
	}
	return strings.Contains(strings.ToLower(code), "throttl") || code == "TransactionConflictException"
}

// permanentCodes are refusals a retry will not change, named here because
// some services send them without a fault (an unmodelled error) or, over
// the query protocol, with a code of their own.
var permanentCodes = map[string]bool{
	"ValidationException": true, "ValidationError": true, "SerializationException": true,
	"InvalidParameterValue": true, "InvalidParameterException": true, "InvalidParameterValueException": true,
	"AccessDenied": true, "AccessDeniedException": true,
	"KMS.AccessDeniedException": true, "KmsAccessDenied": true, "DecryptionFailure": true,
	"ResourceNotFoundException": true, "NotFound": true, "NotFoundException": true,
	"QueueDoesNotExist": true, "AWS.SimpleQueueService.NonExistentQueue": true,
	"UnrecognizedClientException": true, "InvalidClientTokenId": true, "InvalidSignatureException": true,
	"MissingAuthenticationTokenException": true,
}

// expiredCodes say the request was refused, unapplied, because its
// credentials had expired: a later attempt with fresh ones succeeds (a
// long-lived process whose session ran out; another execution
// environment), so they are transient, never a stored permanent failure
// that would acknowledge the event.
var expiredCodes = map[string]bool{"ExpiredToken": true, "ExpiredTokenException": true, "RequestExpired": true}

// fromAWSCall reports whether err came out of an AWS SDK call.
func fromAWSCall(err error) bool {
	if _, ok := errors.AsType[*smithy.OperationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*smithyhttp.RequestSendError](err); ok {
		return true
	}
	_, ok := errors.AsType[*smithy.CanceledError](err)
	return ok
}

// notSent reports whether the request never left: its connection was
// never made (a dial that failed or was refused, a name that did not
// resolve), however long the dial took. A context that ended is not
// counted: it may have ended after the request was written.
func notSent(err error) bool {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	oe, ok := errors.AsType[*net.OpError](err)
	return ok && oe.Op == "dial"
}

// isRead reports whether an operation only reads, by the AWS naming rule.
func isRead(op string) bool {
	for _, p := range []string{"Get", "BatchGet", "Describe", "List", "Head"} {
		if strings.HasPrefix(op, p) {
			return true
		}
	}
	return op == "Query" || op == "Scan"
}

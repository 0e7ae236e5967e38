package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/oncely/oncely/internal/idem"
)

// RequiredIAMActions are exactly the IAM actions the store calls. The SAM
// template grants these and no others (a test keeps them in step).
func RequiredIAMActions() []string {
	return []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
}

// permissions names the IAM action each operation needs, for error messages.
var permissions = map[string]string{
	"PutItem":            "dynamodb:PutItem",
	"UpdateItem":         "dynamodb:UpdateItem",
	"GetItem":            "dynamodb:GetItem",
	"Query":              "dynamodb:Query",
	"Scan":               "dynamodb:Scan",
	"DescribeTable":      "dynamodb:DescribeTable",
	"TransactWriteItems": "each write's own action on its table (dynamodb:PutItem, UpdateItem, DeleteItem or ConditionCheckItem)",
}

// CallError is a DynamoDB call that failed, named for the operator who
// reads the log: the operation, the table, DynamoDB's error code and, for a
// refusal a retry will not fix, what to do about it. Its LogValue gives the
// table, the operation and the code as attributes (idem.StoreAttr logs
// them). The classes of package idem wrap it.
type CallError struct {
	Op, Table string
	// Code is DynamoDB's error code (ResourceNotFoundException,
	// AccessDeniedException, ...), else "HTTP <status>", else what happened
	// to the request ("timeout", "no reply", "connection failed").
	Code string
	Hint string // what to do about a refusal; empty for an outage
	Err  error
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("dynamodb %s on table %q: %s", e.Op, e.Table, e.Code)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s + ": " + e.Err.Error()
}

func (e *CallError) Unwrap() error { return e.Err }

// LogValue implements slog.LogValuer.
func (e *CallError) LogValue() slog.Value {
	return slog.GroupValue(slog.String("table", e.Table), slog.String("op", e.Op), slog.String("error_code", e.Code))
}

// errorCode names what went wrong with a call, for CallError.Code.
func errorCode(err error) string {
	if api, ok := errors.AsType[smithy.APIError](err); ok && api.ErrorCode() != "" {
		return api.ErrorCode()
	}
	re, isResponse := errors.AsType[*smithyhttp.ResponseError](err)
	ne, isNet := errors.AsType[*net.OpError](err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case isResponse && re.HTTPStatusCode() > 0:
		return fmt.Sprintf("HTTP %d", re.HTTPStatusCode())
	case isNet && ne.Op == "dial":
		return "connection failed"
	}
	return "no reply"
}

// classify turns an SDK error (after the SDK's own retries) into idem's
// classes, around a *CallError. It is called at each call site with the
// operation's name. Conditional-check failures never reach it: they are
// domain results.
func (s *Store) classify(op string, err error) error {
	call := &CallError{Op: op, Table: s.table, Code: errorCode(err), Err: err}
	var (
		throughput   *types.ProvisionedThroughputExceededException
		throttling   *types.ThrottlingException
		requestLimit *types.RequestLimitExceeded
		internal     *types.InternalServerError
		notFound     *types.ResourceNotFoundException
	)
	switch {
	case errors.As(err, &throughput), errors.As(err, &throttling), errors.As(err, &requestLimit), errors.As(err, &internal):
		return idem.Transient(call)
	case errors.As(err, &notFound):
		call.Hint = "the table does not exist: create it (the SAM template does) or fix IDEMPOTENCY_TABLE and the region"
		return idem.Permanent(call)
	}
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "ThrottlingException", "Throttling", "TooManyRequestsException", "RequestThrottled", "TransactionConflictException":
			return idem.Transient(call)
		case "UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException":
			// The credentials themselves were refused: no permission would help.
			call.Hint = "dynamodb refused the credentials: they are missing, invalid or expired; check the credentials and the region"
			return idem.Permanent(call)
		case "AccessDeniedException":
			caller := s.caller
			if caller == "" {
				caller = "the function's role needs"
			}
			call.Hint = fmt.Sprintf("access denied: %s %s on it", caller, permissions[op])
			return idem.Permanent(call)
		case "ValidationException", "SerializationException":
			call.Hint = fmt.Sprintf("dynamodb rejected the request as invalid (check the table's key schema: hash key %q of type S)", AttrPK)
			return idem.Permanent(call)
		}
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok {
		switch code := re.HTTPStatusCode(); {
		case code >= 500 || code == 429:
			return idem.Transient(call)
		case code >= 400:
			return idem.Permanent(call)
		}
	}
	// No reply. A request that never left (a dial failure) is transient; any
	// other, including a ctx that ended around the call, may have reached
	// the server, which leaves a write's outcome unknown.
	if ne, ok := errors.AsType[*net.OpError](err); ok && ne.Op == "dial" {
		return idem.Transient(call)
	}
	if op == "GetItem" {
		return idem.Transient(call) // a read has no side effect to be unsure of
	}
	return idem.OutcomeUnknown(call)
}

// missingIndex reports whether a query was refused because the table has
// no such index. It is the one place where the driver reads an error's
// message, because the code alone does not say it: DynamoDB answers
// ValidationException ("The table does not have the specified index:
// <name>"), the code of every malformed request, and moto answers
// ResourceNotFoundException ("Invalid index: <name> for table: <table>"),
// the code of a missing table (TestQueryOfAMissingIndexIsNamed). The code
// is checked first; the message only tells this refusal from the code's
// other uses.
func missingIndex(err error) bool {
	api, ok := errors.AsType[smithy.APIError](err)
	if !ok {
		return false
	}
	switch api.ErrorCode() {
	case "ValidationException":
		return strings.Contains(api.ErrorMessage(), "does not have the specified index")
	case "ResourceNotFoundException":
		return strings.HasPrefix(api.ErrorMessage(), "Invalid index")
	}
	return false
}

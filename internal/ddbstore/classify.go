package ddbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/oncely/oncely/awserr"
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

// classify wraps an SDK error (after the SDK's own retries) in a
// *CallError marked with the class awserr gives it: the translator alone
// decides. A write that got no reply is ClassOutcomeUnknown (it may have
// been applied), a read that got none transient. Conditional-check
// failures never reach it: they are domain results. The code checks here
// only choose a refusal's hint, naming what is missing.
func (s *Store) classify(op string, err error) error {
	call := &CallError{Op: op, Table: s.table, Code: errorCode(err), Err: err}
	switch awserr.Classify(err) {
	case idem.ClassTransient:
		call.Hint = s.hint(op, err) // expired credentials say so
		return idem.Transient(call)
	case idem.ClassOutcomeUnknown:
		return idem.OutcomeUnknown(call)
	case idem.ClassPermanent:
		call.Hint = s.hint(op, err)
		return idem.Permanent(call)
	}
	// Not an AWS error the translator knows: the engine's own rules judge it.
	return call
}

// hint says what to do about a refusal, by its code.
func (s *Store) hint(op string, err error) string {
	api, ok := errors.AsType[smithy.APIError](err)
	if !ok {
		return ""
	}
	switch api.ErrorCode() {
	case "ResourceNotFoundException":
		return "the table does not exist: create it (the SAM templates do) or fix the table name given to the store (the ready function's IDEMPOTENCY_TABLE) and the region"
	case "UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException":
		// The credentials themselves were refused: no permission would help.
		return "dynamodb refused the credentials: they are missing, invalid or expired; check the credentials and the region"
	case "AccessDeniedException":
		caller := s.caller
		if caller == "" {
			caller = "the function's role needs"
		}
		return fmt.Sprintf("access denied: %s %s on it", caller, permissions[op])
	case "ValidationException", "SerializationException":
		return fmt.Sprintf("dynamodb rejected the request as invalid (check the table's key schema: hash key %q of type S)", AttrPK)
	}
	return ""
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

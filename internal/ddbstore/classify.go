package ddbstore

import (
	"errors"
	"fmt"
	"net"

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

// classify turns an SDK error (after the SDK's own retries) into idem's
// classes. It is called at each call site with the operation's name.
// Conditional-check failures never reach it: they are domain results.
func (s *Store) classify(op string, err error) error {
	wrap := fmt.Errorf("dynamodb %s on table %q: %w", op, s.table, err)

	var (
		throughput   *types.ProvisionedThroughputExceededException
		throttling   *types.ThrottlingException
		requestLimit *types.RequestLimitExceeded
		internal     *types.InternalServerError
		notFound     *types.ResourceNotFoundException
	)
	switch {
	case errors.As(err, &throughput), errors.As(err, &throttling), errors.As(err, &requestLimit), errors.As(err, &internal):
		return idem.Transient(wrap)
	case errors.As(err, &notFound):
		return idem.Permanent(fmt.Errorf("dynamodb table %q not found: create it (the SAM template does) or fix IDEMPOTENCY_TABLE and the region: %w", s.table, err))
	}
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		switch api.ErrorCode() {
		case "ThrottlingException", "Throttling", "TooManyRequestsException", "RequestThrottled", "TransactionConflictException":
			return idem.Transient(wrap)
		case "UnrecognizedClientException", "InvalidSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException":
			// The credentials themselves were refused: no permission would help.
			return idem.Permanent(fmt.Errorf("dynamodb refused the credentials for %s on table %q (%s): they are missing, invalid or expired; check the credentials and the region: %w", op, s.table, api.ErrorCode(), err))
		case "AccessDeniedException":
			caller := s.caller
			if caller == "" {
				caller = "the function's role needs"
			}
			return idem.Permanent(fmt.Errorf("access to dynamodb table %q denied: %s %s on it: %w", s.table, caller, permissions[op], err))
		case "ValidationException", "SerializationException":
			return idem.Permanent(fmt.Errorf("dynamodb rejected %s on table %q as invalid (check the table's key schema: hash key %q of type S): %w", op, s.table, AttrPK, err))
		}
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok {
		switch code := re.HTTPStatusCode(); {
		case code >= 500 || code == 429:
			return idem.Transient(wrap)
		case code >= 400:
			return idem.Permanent(wrap)
		}
	}
	// No reply. A request that never left (a dial failure) is transient; any
	// other, including a ctx that ended around the call, may have reached
	// the server, which leaves a write's outcome unknown.
	if ne, ok := errors.AsType[*net.OpError](err); ok && ne.Op == "dial" {
		return idem.Transient(wrap)
	}
	if op == "GetItem" {
		return idem.Transient(wrap) // a read has no side effect to be unsure of
	}
	return idem.OutcomeUnknown(wrap)
}

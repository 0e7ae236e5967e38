package idem

import "github.com/oncely/oncely/driver"

// Label and the labels are the driver's own, documented there.
type Label = driver.Label

// The labels.
const (
	LabelExecuted       = driver.LabelExecuted
	LabelReplayed       = driver.LabelReplayed
	LabelPermanent      = driver.LabelPermanent
	LabelRetryExhausted = driver.LabelRetryExhausted
	LabelPoison         = driver.LabelPoison
	LabelInProgress     = driver.LabelInProgress
	LabelTransient      = driver.LabelTransient
	LabelLeaseLost      = driver.LabelLeaseLost
	LabelStoreError     = driver.LabelStoreError
	LabelStoreRefused   = driver.LabelStoreRefused
	LabelAbandoned      = driver.LabelAbandoned
	LabelSkipped        = driver.LabelSkipped
)

// Labels is driver.Labels.
var Labels = driver.Labels

// Label returns the label of an engine outcome. Adapters add what the
// engine cannot know (poison notes, in-batch copies, FIFO stops).
func (o Outcome) Label() Label {
	switch {
	case o.Err == nil && o.Replayed:
		return LabelReplayed
	case o.Err == nil:
		return LabelExecuted
	case o.Stored && o.Err.Code == CodeRetryExhausted && !o.Replayed:
		// Counted when it happens, not again on every replay: the alarm
		// watches new exhaustions.
		return LabelRetryExhausted
	case o.Stored:
		return LabelPermanent
	}
	switch o.Err.Code {
	case CodeInProgress:
		return LabelInProgress
	case CodeLeaseLost:
		return LabelLeaseLost
	case CodeStoreUnavailable:
		return LabelStoreError
	case CodeStoreMisconfigured:
		return LabelStoreRefused
	case CodeDeadline:
		return LabelSkipped
	case CodeAbandoned:
		return LabelAbandoned
	case CodeKeyReused, CodeInvalidKey, CodeInvalidPayload:
		// Refused before anything ran. The SQS adapter stores a poison note
		// for these; the API adapter answers 4xx.
		return LabelPoison
	}
	return LabelTransient
}

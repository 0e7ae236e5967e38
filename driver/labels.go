package driver

// Label says, in one word, what happened to one message or one request an
// adapter handled (sqsbatch.Result.Label): whether it was acknowledged, and
// why. Labels suit metric names and log fields (the ready function's EMF
// metrics are named by them); adapters return them and never invent their
// own.
type Label string

// The labels. Each says whether the message was acknowledged.
const (
	// LabelExecuted: the action ran and its success is stored. Acknowledged.
	LabelExecuted Label = "executed"
	// LabelReplayed: a stored success was returned without running the
	// action, or an identical copy in the same batch shared one. Acknowledged.
	LabelReplayed Label = "replayed"
	// LabelPermanent: a permanent failure is stored (run now or replayed).
	// Acknowledged.
	LabelPermanent Label = "permanent"
	// LabelRetryExhausted: the per-key attempt cap was reached and
	// RETRY_EXHAUSTED is stored (run now or replayed). Acknowledged, so the
	// message never reaches the DLQ: the template alarms on this label.
	LabelRetryExhausted Label = "retry_exhausted"
	// LabelPoison: not processable as an event; a poison note is stored.
	// Acknowledged.
	LabelPoison Label = "poison"
	// LabelInProgress: another worker holds the key. Back to the queue.
	LabelInProgress Label = "in_progress"
	// LabelTransient: failed transiently; the key is released. Back to the queue.
	LabelTransient Label = "transient"
	// LabelLeaseLost: the lease was taken over; the result was discarded.
	// Back to the queue.
	LabelLeaseLost Label = "lease_lost"
	// LabelStoreError: the store failed for now (an outage, a call cut
	// short); nothing is known to be stored. Back to the queue.
	LabelStoreError Label = "store_error"
	// LabelStoreRefused: the store refused the call for a reason a retry
	// will not fix (a missing table, a denied permission): logged at ERROR
	// with the table and the store's error code. Nothing is stored. Back to
	// the queue, where it fails again until the configuration is fixed.
	LabelStoreRefused Label = "store_refused"
	// LabelAbandoned: the action ignored its context past the work
	// deadline and the invocation answered without it; it may still be
	// running. Nothing is stored. Back to the queue, once its lease ends.
	LabelAbandoned Label = "abandoned"
	// LabelSkipped: not started (too little time left, or an earlier record
	// of its FIFO group failed). Back to the queue.
	LabelSkipped Label = "skipped"
)

// Labels lists every label, in a stable order.
var Labels = []Label{
	LabelExecuted, LabelReplayed, LabelPermanent, LabelRetryExhausted, LabelPoison,
	LabelInProgress, LabelTransient, LabelLeaseLost, LabelStoreError, LabelStoreRefused, LabelSkipped,
	LabelAbandoned,
}

// Acknowledged reports whether a message with this label may be deleted
// from its queue: exactly when a record says what happened to it.
func (l Label) Acknowledged() bool {
	switch l {
	case LabelExecuted, LabelReplayed, LabelPermanent, LabelRetryExhausted, LabelPoison:
		return true
	}
	return false
}

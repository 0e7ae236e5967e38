// Package oncely runs a side effect (a charge, a notification, a ticket)
// at most once per event, for functions that receive their events at least
// once: from a queue that redelivers, from a client that retries, after a
// crash or a timeout. It imports only the standard library; the DynamoDB
// store and the Lambda adapters are packages of their own.
//
// # In a few lines
//
//	engine, err := oncely.New(store, oncely.Options{SentPause: 5 * time.Second})
//	...
//	key, err := oncely.Key("order", order.ID, "charge")
//	receipt, err := oncely.Do(ctx, engine, key, order, func(ctx context.Context) (Receipt, error) {
//		return payments.Charge(ctx, order) // runs once; a retry gets the stored Receipt
//	})
//
// [Wrap] does the same for a handler of your own events.
//
// # What it guarantees
//
// A key is reserved with one conditional write before the work starts;
// of any number of concurrent calls, exactly one runs it. Its owner holds a
// lease: a crashed owner's key is taken over when the lease ends, and a
// late owner's completion is refused (fenced by its token). A success and
// a permanent failure are stored and replayed until the retention ends.
// Transient failures are retried a bounded number of times in the call,
// then the key is released for the next delivery. The same key with
// another payload is refused (KEY_REUSED). Exactly-once delivery is not
// promised: a side effect can happen twice in the windows the project's
// docs/guarantees.md names (the completion write failed, the process died
// after the side effect, the receiver's reply was lost, an abandoned
// action); give your downstream the key ([KeyFrom]) to close them.
//
// # Keys
//
// A key is 8 to 128 characters of A-Z a-z 0-9 : _ -, so
// Do(ctx, e, "order-1", ...) is refused: too short. Build keys with [Key]
// from the event's identity (never the attempt), or with [HashKey] for ids
// outside these characters.
//
// # What is fingerprinted
//
// [Do] fingerprints the payload you pass; [Wrap] the whole event by
// default. A field that changes between copies of one event (a timestamp)
// then gives KEY_REUSED for every copy after the first: choose the
// payload with [PayloadOf], or none with [NoPayload].
//
// # Errors
//
// Mark your errors: [Transient] (and [TransientAfter], [TransientSent])
// for what a retry may fix, [Permanent] or [PermanentCode] for what it
// will not, [OutcomeUnknown] for a side effect you cannot know the outcome
// of. An error nothing marks is stored as a permanent failure and never
// run again, since a retry might repeat a side effect; [Options.Classify]
// can mark them for you: for errors from AWS calls, set it to
// awserr.Classify (package github.com/oncely/oncely/awserr). A replayed
// permanent failure is an *Error with the stored code and its fixed
// sentence, not your error's text (that went to the attempt's log line);
// [ErrReplayed] matches every replayed failure.
//
// # Warnings
//
//   - An action that ignores its context past the work deadline is
//     abandoned: the call returns ABANDONED, retryable, and the action
//     keeps running on its goroutine; its late return is stored only if
//     nobody took the key over. Honour ctx.
//   - A result the store cannot hold (RESULT_TOO_LARGE), or one that does
//     not encode as JSON, is stored as a permanent failure after the side
//     effect happened. Keep results small.
//   - Clocks: the same clock stamps records and judges their expiry; leave
//     Options.Now nil in a deployed function.
//
// # For adapters
//
// The public adapters of this module reach what they need of the engine
// beyond this API (an outcome's label for metrics, the budget that bounds
// their own calls) through an internal accessor, not exported here.
package oncely

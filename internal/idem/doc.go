// Package idem is the domain of oncely: it runs an action at most once per
// key, as far as its [Store] allows, and says what happened in its own
// vocabulary. It imports no AWS package and knows nothing of HTTP: adapters
// (SQS, API Gateway) and drivers (DynamoDB) translate to and from it.
//
// # The record's life
//
//	            Reserve (one conditional write, before any work)
//	(absent) ──────────────────────────────────────────▶ IN_PROGRESS(token, lease)
//	   ▲                                                   │        │
//	   │ retention ends                        Complete    │        │ Fail (token = mine)
//	   │ (counts as absent)                  (token=mine)  ▼        ▼
//	   │                                            SUCCEEDED     FAILED ──retryable=false──▶ replayed
//	   │                                             replayed        │
//	   │                                                             │ retryable=true (released)
//	   │            TakeOver: compare-and-swap on the previous token │
//	   └──── lease ended, or released ◀──────────────────────────────┘
//
// A key names the business event and action (evt:<event-id>:<action>),
// never the delivery attempt ([ValidateKey], [JoinKey]). A [Request] carries
// the key and the payload's fingerprint, computed once before the action
// runs; the same key with another fingerprint is refused (KEY_REUSED).
//
// # One call of Engine.Do
//
//  1. The [Budget] decides whether a useful attempt still fits before the
//     invocation's deadline; if not, nothing is reserved (DEADLINE).
//  2. The key is reserved with a fresh fencing token and a lease. A live
//     record is replayed (SUCCEEDED, permanent FAILED), refused
//     (IN_PROGRESS with its lease's remaining time, KEY_REUSED), or taken
//     over (lease ended, or released) by compare-and-swap.
//  3. The owner runs the action, retrying transient failures in-call with
//     capped exponential backoff ([RetryPolicy]), within its attempts per
//     delivery and the work deadline. An action that ignores its context
//     past the work deadline (plus [Budget.AbandonGrace]) is abandoned:
//     the call returns ABANDONED, retryable, writing nothing, and the
//     action's late return is written only under its own token.
//  4. The outcome is written fenced by the token: a success or a permanent
//     failure is stored and will be replayed; a transient failure releases
//     the key (FAILED, retryable) for the next delivery, unless an optional
//     per-key cap is reached (RETRY_EXHAUSTED, permanent). A writer whose
//     lease was taken over gets LEASE_LOST and its result is discarded.
//
// [Outcome.Stored] is the one bit an adapter needs: a message may be
// acknowledged only when a record durably says what happened to it.
// [Outcome.Label] names what happened, for logs and metrics.
//
// # Errors
//
// Actions and drivers mark errors with a [Class] ([Transient],
// [TransientAfter], [Permanent], [PermanentCode], [OutcomeUnknown]); the
// engine reads the class with errors.As, never from message text. Every
// failure of Do is an [*Error] with a [Code] from the one list in this
// package.
package idem

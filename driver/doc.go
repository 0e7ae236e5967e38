// Package driver is oncely's store contract: what a store must do for the
// engine (package github.com/oncely/oncely) to run an action at most once
// per key, and the vocabulary the two share: records and their states,
// reservations and completions, poison notes, an action's transactional
// writes, outcome codes, and the classes of errors with their markers.
//
// It is for those who write a store (a driver, in go-cloud's sense: this
// package plays the part of gocloud.dev/docstore/driver) or read one. A
// team that only runs actions imports the root package, which re-exports
// the names an action needs (the error markers, Error and its codes).
// Every behaviour of [Store], [EffectStore] and [PoisonRecorder] stated
// here is checked by the conformance suite,
// github.com/oncely/oncely/storetest: a store that passes it keeps the
// engine's guarantees.
//
// The package imports nothing but the standard library. Its types are
// stored formats' contract: a record's states, codes and fields change
// only with the stored format's version, never silently.
package driver

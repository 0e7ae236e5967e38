// Package engineref lets this module's public adapters reach the domain
// engine inside a *oncely.Engine (its label of an outcome, its budget,
// DoWork) without the public API naming an internal type. Package oncely
// sets Idem in its init; nothing else writes it.
package engineref

import (
	"context"

	"github.com/oncely/oncely/internal/idem"
)

// Idem returns the domain engine of e, a *oncely.Engine (nil for anything
// else). Set by package oncely's init.
var Idem func(e any) *idem.Engine

// Run runs work under e, a *oncely.Engine, exactly as Engine.Run does (its
// Options.Classify, the sent rule for unmarked errors, the key in the
// work's context), in the domain's types. Set by package oncely's init.
var Run func(e any, ctx context.Context, req idem.Request, work idem.Work) idem.Outcome

// Wrap returns a *oncely.Engine around a domain engine the product built
// with its test seams (the clock, the sleep, the jitter, the tokens),
// without Options.Classify. Set by package oncely's init.
var Wrap func(e *idem.Engine) any

// WithKey returns ctx carrying key, as oncely.KeyFrom reads it (for
// hooks that run outside the work, such as apigw's OnReplay). Set by
// package oncely's init.
var WithKey func(ctx context.Context, key string) context.Context

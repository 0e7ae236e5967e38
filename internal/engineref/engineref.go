// Package engineref lets this module's public adapters reach the domain
// engine inside a *oncely.Engine (its label of an outcome, its budget,
// DoWork) without the public API naming an internal type. Package oncely
// sets Idem in its init; nothing else writes it.
package engineref

import "github.com/oncely/oncely/internal/idem"

// Idem returns the domain engine of e, a *oncely.Engine (nil for anything
// else). Set by package oncely's init.
var Idem func(e any) *idem.Engine

// Package leaky names its internal package in every way apicheck reports,
// and uses it in ways it must not report.
package leaky

import (
	"context"

	"example.com/leaky/alias"
	"example.com/leaky/internal/idem"
)

// Reported.

func Get(key string) (idem.Record, error) { return idem.Record{}, nil }

type Options struct {
	Name  string
	Store idem.Store
}

type Engine struct{ e *idem.Engine }

func (e *Engine) Code() map[string][]idem.Code { return nil }

type Record = idem.Record

var Default = idem.New()

const Done = idem.Done

type Wrapper struct {
	*idem.Engine
}

type Store interface {
	idem.Store
}

type Getter interface {
	Lookup(ctx context.Context) (alias.R, error)
}

func Reduce[T interface{ ~[]idem.Code }](xs T) {}

func Via(r alias.R) {}

// Not reported: no exported declaration names idem.

type Plain struct {
	Name  string
	inner idem.Record
}

func (e *Engine) Name() string        { return e.e.Run().Key }
func (e *Engine) record() idem.Record { return idem.Record{} }

func lookup() idem.Record { return idem.Record{} }

var cache = map[string]idem.Record{}

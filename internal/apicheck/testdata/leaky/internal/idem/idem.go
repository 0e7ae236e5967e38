// Package idem is internal to the leaky fixture.
package idem

import "context"

type Record struct{ Key string }

type Code string

const Done Code = "done"

type Store interface {
	Get(context.Context, string) (Record, error)
}

type Engine struct{}

func (*Engine) Run() Record { return Record{} }

func New() *Engine { return &Engine{} }

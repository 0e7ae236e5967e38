// Package fixture is a throwaway public package for apicheck's tests: one
// declaration of every kind the API file records.
package fixture

import (
	"context"
	"io"

	"example.com/clean/internal/secret"
	"example.com/clean/shape"
)

// Constants: untyped, typed, and an iota sequence.
const (
	MaxKeyLen         = 128
	Greeting          = "hello"
	StatusDone Status = iota
	StatusFailed
	unexportedConst = 1
)

// Status is a defined basic type with a value method.
type Status int

func (s Status) String() string { return "status" }

// Vars: one declared with a type, one inferred.
var (
	ErrClosed = io.ErrClosedPipe
	Default   Options
	hidden    = secret.Token{}
)

// Options has exported, unexported and embedded fields.
type Options struct {
	Retry   int
	Timeout func(context.Context) (time int, ok bool)
	Shape   shape.Shape  `json:"shape"`
	token   secret.Token // unexported: not API, though its type is internal
	io.Reader
	base
}

// base is unexported; its exported method is promoted to Options.
type base struct{}

func (base) Name() string { return "base" }

// Engine has pointer-receiver methods.
type Engine struct{ s secret.Token }

// New is a constructor with a variadic parameter.
func New(opts Options, tags ...string) (*Engine, error) { return &Engine{}, nil }

func (e *Engine) Run(ctx context.Context, req map[string][]byte) (<-chan error, chan<- int) {
	return nil, nil
}

func (e *Engine) close() {}

// Store is an interface with an unexported method.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(context.Context, string, []byte) error
	seal()
}

// Reader embeds another interface.
type ReadStore interface {
	io.Reader
	Store
}

// Number is a constraint.
type Number interface {
	~int | ~int64 | ~float64
}

// Cache is generic, with methods on it.
type Cache[K comparable, V any] struct {
	Items map[K]V
}

func (c *Cache[K, V]) Get(k K) (V, bool) { v, ok := c.Items[k]; return v, ok }

// Sum is a generic function with an inline constraint.
func Sum[T ~int | ~float64](xs ...T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

// Do is a generic function taking a function.
func Do[R any](ctx context.Context, e *Engine, key string, fn func(context.Context) (R, error)) (R, error) {
	return fn(ctx)
}

// Aliases: to a type of another public package, and a generic one.
type (
	Circle      = shape.Circle
	Pair[T any] = [2]T
)

// Handler is a func type.
type Handler func(ctx context.Context, event []byte) error

// Anonymous types in signatures.
func Configure(struct {
	Name string
	Size int
}) interface{ Close() error } {
	return nil
}

func unexported() secret.Token { return secret.Token{} }

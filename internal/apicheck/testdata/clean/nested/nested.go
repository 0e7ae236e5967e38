// Package nested is in a module of its own (the test writes its go.mod).
package nested

func Nested() {}

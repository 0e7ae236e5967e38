// Package secret is internal: public packages may use it, but no exported
// declaration may name it.
package secret

// Token is an internal type.
type Token struct{ V string }

// Package alias is public and re-exports an internal type by an alias.
package alias

import "example.com/leaky/internal/idem"

type R = idem.Record

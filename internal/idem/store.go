package idem

import (
	"log/slog"

	"github.com/oncely/oncely/driver"
)

// StoreAttr is driver.StoreAttr.
func StoreAttr(err error) slog.Attr { return driver.StoreAttr(err) }

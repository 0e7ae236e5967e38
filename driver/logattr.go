package driver

import (
	"errors"
	"log/slog"
)

// StoreAttr is the log attribute "store" that describes a store error the
// way its driver chose: the first slog.LogValuer in the error's chain
// (dynamostore's errors give the table, the operation and DynamoDB's
// error code). Without one it is the empty Attr, which handlers leave out.
func StoreAttr(err error) slog.Attr {
	var lv slog.LogValuer
	if errors.As(err, &lv) {
		return slog.Any("store", lv)
	}
	return slog.Attr{}
}

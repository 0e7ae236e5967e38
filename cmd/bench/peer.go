package main

import (
	"context"
	"errors"
)

func peerCompare(ctx context.Context, moto, rieBin, boot, dir string, total, runs, starts int, out string) error {
	return errors.New("TODO")
}

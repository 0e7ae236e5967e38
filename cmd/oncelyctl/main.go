// Command oncelyctl is the operator's tool for oncely's idempotency
// records: get, list, stats, release, forget. It wires the process to
// package opsctl, which holds the commands (run oncelyctl -h, or see the
// docs/operating.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/oncely/oncely/internal/opsctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := opsctl.Run(ctx, os.Args[1:], opsctl.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv: os.Getenv, Now: time.Now, AWS: opsctl.LoadAWS,
	})
	stop()
	os.Exit(code)
}

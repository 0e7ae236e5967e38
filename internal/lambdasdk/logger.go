package lambdasdk

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"
)

// Logger returns the SDK's logger for a function: the SDK's own warnings
// (for example "failed to discard remaining HTTP response body") become
// lines of l, so that every line the function writes is one JSON object
// with the invocation's request id. The SDK's default logger prints plain
// text lines ("SDK 2026/12/01 … WARN …") to standard error instead.
func Logger(l *slog.Logger) logging.Logger {
	return sdkLogger{l: l}
}

type sdkLogger struct{ l *slog.Logger }

// Logf implements logging.Logger.
func (s sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	switch c {
	case logging.Warn:
		level = slog.LevelWarn
	case logging.Debug:
		level = slog.LevelDebug
	}
	s.l.Log(context.Background(), level, fmt.Sprintf(format, v...), "source", "aws-sdk")
}

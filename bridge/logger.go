package bridge

import (
	"io"
	"log/slog"
)

// Log levels for NewLogger.
const (
	LogInfo  = slog.LevelInfo
	LogDebug = slog.LevelDebug
)

// NewLogger returns the daemon's logger: text or JSON lines on w.
func NewLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

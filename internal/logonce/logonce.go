// Package logonce logs a warning the first time its key is seen.
package logonce

import (
	"log/slog"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// Log logs a warning the first time its key is seen. Keys are bounded,
// since model names come from clients: the oldest is forgotten first.
type Log struct {
	log  *slog.Logger
	seen *cache.LRU[string, struct{}]
}

// New returns a Log writing to log, keeping the last 4,096 keys.
func New(log *slog.Logger) *Log {
	return &Log{log: log, seen: cache.New[string, struct{}](4096)}
}

// Warn logs msg at warning level the first time key is seen.
func (l *Log) Warn(key, msg string, attrs ...any) {
	if _, seen := l.seen.Swap(key, struct{}{}); !seen {
		l.log.Warn(msg, attrs...)
	}
}

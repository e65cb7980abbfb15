package proxy

import (
	"log/slog"

	"github.com/ctxproxy/ctxproxy/internal/cache"
)

// onceLog logs a warning the first time its key is seen; keys are
// bounded, since model names come from clients.
type onceLog struct {
	log  *slog.Logger
	seen *cache.LRU[string, struct{}]
}

func newOnceLog(log *slog.Logger) *onceLog {
	return &onceLog{log: log, seen: cache.New[string, struct{}](4096)}
}

// warn logs msg at warning level the first time key is seen; keys
// are bounded, since model names come from clients.
func (s *onceLog) warn(key, msg string, attrs ...any) {
	if _, seen := s.seen.Swap(key, struct{}{}); !seen {
		s.log.Warn(msg, attrs...)
	}
}

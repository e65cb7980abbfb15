package proxy

import (
	"log/slog"
	"sync"
)

// onceLog logs a warning the first time its key is seen; keys are
// bounded, since model names come from clients.
type onceLog struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]bool
}

// warn logs msg at warning level the first time key is seen; keys
// are bounded, since model names come from clients.
func (s *onceLog) warn(key, msg string, attrs ...any) {
	s.mu.Lock()
	if s.m == nil || len(s.m) >= 4096 {
		s.m = map[string]bool{}
	}
	seen := s.m[key]
	s.m[key] = true
	s.mu.Unlock()
	if !seen {
		s.log.Warn(msg, attrs...)
	}
}

package backend

import (
	"strings"
	"time"
)

// Listing is what a server last said it has: the models its /api/tags
// lists and those its /api/ps says are loaded. The Poller takes it; a
// router reads it to send a request only where its model is.
type Listing struct {
	// At is when the server answered; zero while it never has.
	At time.Time
	// Models and Loaded hold names as Ollama writes them
	// ("qwen3:latest").
	Models map[string]bool
	Loaded map[string]bool
}

// tagged is model as Ollama names it: "qwen3" is "qwen3:latest".
func tagged(model string) string {
	if model != "" && !strings.Contains(model, ":") {
		return model + ":latest"
	}
	return model
}

// Has reports whether the server lists model; known is false while it
// has not listed its models (never answered, or not an Ollama server).
func (l Listing) Has(model string) (has, known bool) {
	if l.At.IsZero() {
		return false, false
	}
	return l.Models[tagged(model)] || l.Models[model], true
}

// IsLoaded reports whether the server had model loaded when last asked.
func (l Listing) IsLoaded(model string) bool {
	return l.Loaded[tagged(model)] || l.Loaded[model]
}

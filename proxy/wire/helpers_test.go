package wire

import (
	"fmt"
	"runtime"
	"strings"
)

// chatBody100K is a 100-message, ~100 KB Ollama chat request.
func chatBody100K() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"llama3.1:8b","stream":false,"options":{"temperature":0.2},"messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for i := range 100 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("message %d says something useful. ", i), 30))
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// bytesPerRequest is the heap the whole process allocates per call of
// fn, averaged over n calls.
func bytesPerRequest(n int, fn func()) uint64 {
	fn()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		fn()
	}
	runtime.ReadMemStats(&b)
	return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
}

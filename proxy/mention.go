package proxy

import (
	"io"
	"sync"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// The routes passed through unread whose body names a model: the model is
// prepared (backend.Backend.Prepare) in the background as the body goes
// to the backend, so that its first chat request finds its tokenizer
// built. The chat routes and /api/generate read the model themselves
// (Backend.Model).
var mentions = map[string]bool{"/api/show": true, "/api/embed": true, "/api/embeddings": true, "/v1/embeddings": true}

// mentionHead is how much of a body is read for its model: the model is
// prepared when the body names it within these first bytes.
const mentionHead = 64 << 10

// mention is a request body that keeps its first bytes as the backend
// reads them, and when it is read through them, or closed, hands the
// model they name ("model", or "name" as /api/show also takes it) to
// prepare. The request never waits for it.
type mention struct {
	io.ReadCloser
	prepare func([]string)

	mu   sync.Mutex
	head []byte
	once sync.Once
}

func (m *mention) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	m.mu.Lock()
	m.head = append(m.head, p[:min(n, mentionHead-len(m.head))]...)
	full := len(m.head) == mentionHead
	m.mu.Unlock()
	if full || err != nil {
		m.done()
	}
	return n, err
}

func (m *mention) Close() error {
	err := m.ReadCloser.Close()
	m.done()
	return err
}

func (m *mention) done() {
	m.once.Do(func() {
		m.mu.Lock()
		head := m.head
		m.head = nil
		m.mu.Unlock()
		if name := modelNamed(head); name != "" {
			m.prepare([]string{name})
		}
	})
}

// modelNamed returns the model a JSON object names among its members in
// head, the start of a body that may go on.
func modelNamed(head []byte) string {
	var name string
	_, _ = jsonscan.ValidMembers(head, jsonscan.MaxDepth, func(key, val []byte) {
		if k := string(key); name == "" && (k == `"model"` || k == `"name"`) && jsonscan.KindOf(val) == jsonscan.KindString {
			name, _ = jsonscan.Unquote(val)
		}
	})
	return name
}

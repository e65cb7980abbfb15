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
// prepared when the body names it within these first bytes. Clients name
// it first: the first mentionQuick bytes are looked at alone, and a body
// that names it there is not kept further.
const (
	mentionHead  = 64 << 10
	mentionQuick = 1 << 10
)

// mention is a request body that keeps its first bytes as the backend
// reads them, until they name a model ("model", or "name" as /api/show
// also takes it), which it hands to prepare; or until it is read through
// them, or closed. The request never waits for it.
type mention struct {
	io.ReadCloser
	prepare func([]string)

	mu      sync.Mutex
	head    []byte
	decided bool
}

func (m *mention) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.decided {
		return n, err
	}
	quick := len(m.head) < mentionQuick
	m.head = append(m.head, p[:min(n, mentionHead-len(m.head))]...)
	if quick {
		if name := modelNamed(m.head[:min(len(m.head), mentionQuick)]); name != "" {
			m.decide(name)
			return n, err
		}
	}
	if len(m.head) == mentionHead || err != nil {
		m.decide(modelNamed(m.head))
	}
	return n, err
}

func (m *mention) Close() error {
	err := m.ReadCloser.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.decided {
		m.decide(modelNamed(m.head))
	}
	return err
}

// decide ends the reading: name is the model the body names, "" for
// none (m.mu held).
func (m *mention) decide(name string) {
	m.decided, m.head = true, nil
	if name != "" {
		m.prepare([]string{name})
	}
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

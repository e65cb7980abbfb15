package proxy

import "sync"

// copyBufferSize is the size of the buffer httputil.ReverseProxy copies a
// response through; without a BufferPool it allocates one for every
// response (the largest allocation of a small proxied request).
const copyBufferSize = 32 << 10

// bufferPool is an httputil.BufferPool of copy buffers, shared by every
// response ctxproxy forwards.
type bufferPool struct{ p sync.Pool }

// copyBuffers is the one pool the reverse proxies use.
var copyBuffers = newBufferPool()

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

// Get returns a buffer of copyBufferSize bytes.
func (b *bufferPool) Get() []byte { return b.p.Get().(*[copyBufferSize]byte)[:] }

// Put returns a buffer from Get to the pool; others are dropped.
func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != copyBufferSize {
		return
	}
	b.p.Put((*[copyBufferSize]byte)(buf[:copyBufferSize]))
}

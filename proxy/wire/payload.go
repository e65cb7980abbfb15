package wire

import (
	"bytes"
	"io"
	"net"
)

// Payload is a request body to forward, in parts. An edited chat body is
// the client's own bytes around the edits: a 100 KB chat whose only edit
// is options.num_ctx is forwarded as the bytes before the options, the
// new options, and the bytes after, without a 100 KB copy (and the
// allocation the collector then has to sweep) on every request.
type Payload [][]byte

// PayloadOf is the payload of one contiguous body.
func PayloadOf(b []byte) Payload { return Payload{b} }

// Size is the payload's length in bytes.
func (p Payload) Size() int {
	n := 0
	for _, b := range p {
		n += len(b)
	}
	return n
}

// Bytes returns the payload in one slice; copied only when it has
// several parts.
func (p Payload) Bytes() []byte {
	switch len(p) {
	case 0:
		return nil
	case 1:
		return p[0]
	}
	out := make([]byte, 0, p.Size())
	for _, b := range p {
		out = append(out, b...)
	}
	return out
}

// joinUnder is the size up to which Body joins a payload's parts into
// one slice. net/http's Transport writes a request whose body it knows to
// be in memory (a *bytes.Reader) with its head in one write, and any
// other body after a write of the head alone. For a small chat that
// second write, and the backend's wake-up for it, cost more than
// ctxproxy's own work; for a large one the copy costs more than the write
// (a 100 KB body: about 20 µs against 5), so its parts go out as they
// are, in one writev after the head (payloadReader.WriteTo, which the
// proxy's connections call).
const joinUnder = 16 << 10

// Body returns the payload as a request body, from its start; each call
// starts again, as a request's GetBody must.
func (p Payload) Body() io.ReadCloser {
	if p.Size() <= joinUnder {
		return io.NopCloser(bytes.NewReader(p.Bytes()))
	}
	return &payloadReader{parts: append(Payload(nil), p...)}
}

// payloadReader reads a payload's parts as one stream. Each Read fills as
// much of the buffer as the parts allow, so the transport writes the
// same chunks it would for one contiguous body.
type payloadReader struct {
	parts Payload
}

func (r *payloadReader) Read(b []byte) (int, error) {
	n := 0
	for len(b) > 0 && len(r.parts) > 0 {
		c := copy(b, r.parts[0])
		n += c
		b = b[c:]
		if r.parts[0] = r.parts[0][c:]; len(r.parts[0]) == 0 {
			r.parts = r.parts[1:]
		}
	}
	if n == 0 && len(r.parts) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Close does nothing: the parts stay the payload's.
func (r *payloadReader) Close() error { return nil }

// Len is how many bytes are left to read.
func (r *payloadReader) Len() int { return r.parts.Size() }

// WriteTo writes what is left in one system call where w is a network
// connection (writev), as bytes.Reader's WriteTo writes one slice.
func (r *payloadReader) WriteTo(w io.Writer) (int64, error) {
	bufs := net.Buffers(r.parts)
	r.parts = nil
	return bufs.WriteTo(w)
}

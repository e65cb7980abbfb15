package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// writeConn records each Write a connection is given.
type writeConn struct {
	net.Conn
	writes [][]byte
}

func (c *writeConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), b...))
	return len(b), nil
}

// A body of known length held in memory reaches the connection in one
// call per part (one writev on a TCP connection), not in 32 KiB pieces;
// any other reader, or a body longer than the length the transport
// allows, is copied as io.Copy copies it, never past the limit.
func TestBodyConnWritesPayloadWhole(t *testing.T) {
	parts := wire.Payload{[]byte(strings.Repeat("a", 60<<10)), []byte(`"num_ctx":8192`), []byte(strings.Repeat("b", 60<<10))}
	want := string(parts.Bytes())

	rec := &writeConn{}
	lr := &io.LimitedReader{R: parts.Body(), N: int64(parts.Size())}
	n, err := bodyConn{rec}.ReadFrom(lr)
	if err != nil || n != int64(len(want)) || lr.N != 0 {
		t.Fatalf("ReadFrom = %d, %v; left %d", n, err, lr.N)
	}
	if len(rec.writes) != len(parts) || string(bytes.Join(rec.writes, nil)) != want {
		t.Errorf("payload went out in %d writes (want %d, one per part)", len(rec.writes), len(parts))
	}

	rec = &writeConn{}
	lr = &io.LimitedReader{R: strings.NewReader(want), N: 100}
	if n, err := (bodyConn{rec}).ReadFrom(lr); err != nil || n != 100 || string(bytes.Join(rec.writes, nil)) != want[:100] {
		t.Errorf("a body longer than its limit: wrote %d (%v), want the first 100 bytes only", n, err)
	}

	rec = &writeConn{}
	if n, err := (bodyConn{rec}).ReadFrom(io.MultiReader(strings.NewReader("x"), strings.NewReader("y"))); err != nil || n != 2 || string(bytes.Join(rec.writes, nil)) != "xy" {
		t.Errorf("a plain reader: wrote %d (%v)", n, err)
	}
}

// Through the transport the backend receives the payload byte for byte,
// on a reused connection, whatever the size of its parts.
func TestTransportSendsPayloadBodies(t *testing.T) {
	var got []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
	}))
	defer backend.Close()
	tr := NewTransport(Config{})
	defer tr.CloseIdleConnections()
	// The transport's connections are the ones that write a payload
	// whole (TestBodyConnWritesPayloadWhole).
	c, err := tr.DialContext(context.Background(), "tcp", strings.TrimPrefix(backend.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(bodyConn); !ok {
		t.Errorf("the transport dials %T, not a bodyConn", c)
	}
	c.Close()
	bodies := []wire.Payload{
		{[]byte(`{"a":1}`)},
		{[]byte(`{"m":"` + strings.Repeat("x", 100<<10)), []byte(`","options":{"num_ctx":8192}}`)},
		{[]byte(strings.Repeat("y", 40<<10))},
	}
	for _, p := range bodies {
		req, _ := http.NewRequest(http.MethodPost, backend.URL, p.Body())
		req.ContentLength = int64(p.Size())
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for i, p := range bodies {
		if got[i] != string(p.Bytes()) {
			t.Errorf("body %d: backend got %d bytes, want %d", i, len(got[i]), p.Size())
		}
	}
}

package wire

import (
	"io"
	"testing"
	"testing/iotest"
)

func TestPayloadReader(t *testing.T) {
	p := Payload{[]byte(`{"a":`), nil, []byte(`1`), []byte(``), []byte(`,"b":[2,3]}`)}
	want := `{"a":1,"b":[2,3]}`
	if got := string(p.Bytes()); got != want {
		t.Fatalf("bytes() = %s, want %s", got, want)
	}
	if p.Size() != len(want) {
		t.Fatalf("size() = %d, want %d", p.Size(), len(want))
	}
	// Every read pattern sees the same bytes, and each reader starts
	// again (GetBody on a retry).
	for range 2 {
		if err := iotest.TestReader(p.Body(), []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(iotest.OneByteReader(p.Body()))
		if err != nil || string(got) != want {
			t.Fatalf("one byte at a time: %s, %v", got, err)
		}
	}
	if got := string(p.Bytes()); got != want {
		t.Fatalf("reading changed the payload: %s", got)
	}
	if n, err := (Payload{}).Body().Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("empty payload: %d, %v", n, err)
	}
}

// TestPayloadReadsFillTheBuffer pins that a read spans parts: the
// transport then writes the same chunks as for one contiguous body.
func TestPayloadReadsFillTheBuffer(t *testing.T) {
	p := Payload{[]byte("abc"), []byte("de"), []byte("fghij")}
	buf := make([]byte, 8)
	n, err := p.Body().Read(buf)
	if n != 8 || err != nil || string(buf) != "abcdefgh" {
		t.Fatalf("Read = %d %v %q, want 8 bytes across the parts", n, err, buf[:n])
	}
}

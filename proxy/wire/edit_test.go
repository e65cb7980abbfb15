package wire

import (
	"io"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
)

// rebuild edits a body in one copy; it must give what the member
// edits one after another give.
func TestRebuildBodyMatchesEditsInTurn(t *testing.T) {
	msgs := []chat.Message{{Role: "user", Content: "hi"}}
	for _, in := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a"}]}`,
		`{"model":"m","options":{"temperature":0.2},"messages":[],"stream":false}`,
		`{"options":{"num_ctx":1024,"seed":1},"messages":[{"role":"user","content":"a"}],"truncate":true}`,
		` { "messages" : [ ] , "options" : null } `,
		`{"messages":[{"role":"user","content":"a"}],"options":{}}`,
		`{"messages":[],"messages":[1]}`,
	} {
		for _, setMsgs := range []bool{false, true} {
			for _, numCtx := range []int{0, 8192} {
				for _, noTrunc := range []bool{false, true} {
					body := []byte(in)
					want := body
					var err error
					if setMsgs {
						arr, _ := EncodeMessages(msgs)
						want, err = SetMember(want, "messages", arr)
					}
					if err == nil && numCtx > 0 {
						want, err = setOption(want, "num_ctx", appendInt(nil, numCtx))
					}
					if err == nil && noTrunc {
						want, err = SetMember(want, "truncate", []byte("false"))
					}
					if err != nil {
						t.Fatal(err)
					}
					for _, ms := range [][]Member{nil, mustMembers(t, body)} {
						parts, err := rebuild(body, ms, msgs, setMsgs, numCtx, noTrunc)
						got := parts.Bytes()
						if read, _ := io.ReadAll(parts.Body()); string(read) != string(got) {
							t.Errorf("the payload reads %s, joins %s", read, got)
						}
						if err != nil || string(got) != string(want) {
							t.Errorf("rebuild(%s, messages %v, num_ctx %d, truncate %v) = %s, %v; want %s",
								in, setMsgs, numCtx, noTrunc, got, err, want)
						}
					}
					if string(body) != in {
						t.Fatalf("the body was changed in place: %s", body)
					}
				}
			}
		}
	}
}

func mustMembers(t *testing.T, b []byte) []Member {
	ms, err := Members(b)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// A 100 KB chat whose num_ctx is set and truncate added: no copy of the
// body (the payload is its own bytes around the edits) and no scan of it
// (the members come from DecodeChat).
func TestRebuildBodyAllocs(t *testing.T) {
	req, err := DecodeChat(Ollama, chatBody100K())
	if err != nil {
		t.Fatal(err)
	}
	edit := func() {
		if _, err := rebuild(req.Body, req.members, req.Messages, false, 131072, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(20, edit); n > 12 {
		t.Errorf("%v allocations to set num_ctx and truncate, want at most 12", n)
	}
	// Setting them one after the other copied the body twice; splicing
	// them into one new body copied it once.
	if n := bytesPerRequest(20, edit); n > 1024 {
		t.Errorf("%d bytes allocated to edit a %d-byte body, want no copy of it", n, len(req.Body))
	}
}

func BenchmarkRebuildBody(b *testing.B) {
	req, err := DecodeChat(Ollama, chatBody100K())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("spliced", func(b *testing.B) {
		b.SetBytes(int64(len(req.Body)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rebuild(req.Body, req.members, req.Messages, false, 131072, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the request path did before: each member set in turn, each
	// scanning and copying the body.
	b.Run("edits-in-turn", func(b *testing.B) {
		b.SetBytes(int64(len(req.Body)))
		b.ReportAllocs()
		for b.Loop() {
			out, err := setOption(req.Body, "num_ctx", appendInt(nil, 131072))
			if err == nil {
				_, err = SetMember(out, "truncate", []byte("false"))
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

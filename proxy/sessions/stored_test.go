package sessions

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/ctxproxy/ctxproxy/proxy/wire"
)

// FuzzPlainReply holds plainReply to the bytes json.Marshal gives the
// reply's map, which is what a stored reply was before it.
func FuzzPlainReply(f *testing.F) {
	for _, s := range []string{"", "The sea is wide.", "a \"quote\" and \\ and \n\t\r\x01", "<b>&amp;</b>",
		"line\u2028sep\u2029", "caf\u00e9 \U0001F30A", "bad \xff\xfe utf-8", "\x7f", "form\ffeed and back\bspace"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		want, err := json.Marshal(map[string]any{"role": "assistant", "content": content})
		if err != nil {
			t.Fatal(err)
		}
		if got := ReplyMessage(wire.Ollama, wire.Reply{Content: content}); !bytes.Equal(got.Raw, want) {
			t.Fatalf("replyMessage(%q).Raw = %s, json.Marshal gives %s", content, got.Raw, want)
		}
		if got, ok := plainReply(wire.Reply{Content: content}); ok && !bytes.Equal(got, want) {
			t.Fatalf("plainReply(%q) = %s, json.Marshal gives %s", content, got, want)
		}
	})
}

// TestPlainReplyAllocs guards the plain reply's one allocation.
func TestPlainReplyAllocs(t *testing.T) {
	rep := wire.Reply{Content: "The sea is wide and calm today. The sea is wide and calm today."}
	if _, ok := plainReply(rep); !ok {
		t.Fatal("a plain text reply is not plain")
	}
	if n := testing.AllocsPerRun(100, func() { ReplyMessage(wire.Ollama, rep) }); n > 1 {
		t.Errorf("replyMessage of a plain reply: %v allocations, want 1", n)
	}
}

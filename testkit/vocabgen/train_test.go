package vocabgen

import (
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/tokenizer"
)

func spm(v Vocab) tokenizer.Tokenizer {
	return tokenizer.NewSentencePiece(&tokenizer.Vocabulary{Values: v.Tokens, Types: v.Types, Scores: v.Scores,
		AddBOS: v.AddBOS, BOS: []int32{int32(v.BOS)}, EOS: []int32{int32(v.EOS)}})
}

// TestTrained: a vocabulary trained on texts tokenizes them in far fewer
// tokens than characters, pieces crossing spaces and lines, tokenizes
// other text too (characters it saw, bytes for the rest), decodes back
// to the text, is the same for the same texts, and keeps to its size.
func TestTrained(t *testing.T) {
	prompt := strings.Repeat("You are a coding agent. Use the tools below to answer.\n"+
		`{"type":"function","function":{"name":"Bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}`+"\n", 3)
	texts := []string{prompt, "Say hi", prompt + "And then some more words."}
	v := Trained(texts, 2000)
	if len(v.Tokens) > 2000 || len(v.Tokens) != len(v.Types) || len(v.Tokens) != len(v.Scores) {
		t.Fatalf("%d tokens, %d types, %d scores", len(v.Tokens), len(v.Types), len(v.Scores))
	}
	if w := Trained(texts, 2000); !slices.Equal(w.Tokens, v.Tokens) || !slices.Equal(w.Scores, v.Scores) {
		t.Error("the same texts made another vocabulary")
	}
	tok := spm(v)
	ids, err := tok.Encode(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids)*20 > len(prompt) {
		t.Errorf("%d bytes took %d tokens: want at least 20 bytes a token", len(prompt), len(ids))
	}
	for _, text := range []string{prompt, "something else entirely: ünïcödé 的一是 \t\x01", "<|im_start|>user\nhi<|im_end|>\n"} {
		ids, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tok.Decode(ids)
		if err != nil || got != text {
			t.Errorf("decode(encode(%q)) = %q, %v", text, got, err)
		}
	}
	if ids, _ := tok.Encode("<|im_start|>", false); len(ids) != 1 {
		t.Errorf("a ChatML marker is %d tokens", len(ids))
	}
}

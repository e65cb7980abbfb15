// Command mkmodel writes the tiny model scripts/realollama/start.sh gives
// the real Ollama: a 2-layer llama with random weights, a byte-level BPE
// vocabulary of 276 tokens (the 256 bytes, 16 merges, and the ChatML
// markers) and an 8192-token window. The same file every time.
package main

import (
	"flag"
	"log"

	"github.com/ctxproxy/ctxproxy/testkit/ggufgen"
	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
)

func main() {
	out := flag.String("o", "tiny.gguf", "the GGUF file to write")
	ctx := flag.Int("ctx", 8192, "the model's context length")
	flag.Parse()
	v := vocabgen.BPE(256+16+len(vocabgen.Specials), "default", 1)
	if err := ggufgen.Write(*out, v, ggufgen.Shape{Context: *ctx, Seed: 1}); err != nil {
		log.Fatal(err)
	}
}

// Command fakeserver serves ctxproxy's fake backend on a port of its own,
// for load tests against the built binary (scripts/load.sh,
// scripts/bench.sh).
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:11500", "address to listen on")
	kind := flag.String("kind", "ollama", "ollama or openai")
	chunks := flag.Int("chunks", 0, "stream chunks per reply (0: the fake's default)")
	delay := flag.Duration("chunk-delay", 0, "pause between stream chunks")
	reply := flag.String("reply", "ok", "the assistant's answer")
	flag.Parse()
	k := fakebackend.Ollama
	if *kind == "openai" {
		k = fakebackend.OpenAI
	}
	o := fakebackend.Options{Reply: *reply, Chunks: *chunks, ChunkDelay: *delay}
	log.Fatal(http.ListenAndServe(*listen, fakebackend.Handler(k, o)))
}

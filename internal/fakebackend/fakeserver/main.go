// Command fakeserver serves ctxproxy's fake backend on a port of its own,
// for load tests against the built binary (scripts/load.sh).
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/fakebackend"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:11500", "address to listen on")
	kind := flag.String("kind", "ollama", "ollama or openai")
	flag.Parse()
	k := fakebackend.Ollama
	if *kind == "openai" {
		k = fakebackend.OpenAI
	}
	log.Fatal(http.ListenAndServe(*listen, fakebackend.Handler(k, fakebackend.Options{Reply: "ok"})))
}

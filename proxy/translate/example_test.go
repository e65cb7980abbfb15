package translate_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

func ExampleRequest() {
	body := []byte(`{"model":"llama3.1","messages":[{"role":"user","content":"Hi"}],"max_tokens":64,"user":"u-42"}`)
	out, info, err := translate.Request(body, translate.RequestOptions{NumCtx: 8192})
	var e *translate.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, string(e.JSON())) // answer the client with these
		return
	}
	fmt.Println(string(out))
	fmt.Println(info.Model, info.Stream, info.Dropped)
	// Output:
	// {"model":"llama3.1","messages":[{"role":"user","content":"Hi"}],"stream":false,"options":{"num_ctx":8192,"num_predict":64,"temperature":1,"top_p":1}}
	// llama3.1 false [{user Ollama has no end-user id}]
}

func ExampleStream() {
	ollama := strings.NewReader(`{"model":"llama3.1","created_at":"2025-06-01T12:00:00Z","message":{"role":"assistant","content":"Hello"},"done":false}
{"model":"llama3.1","created_at":"2025-06-01T12:00:01Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":9,"eval_count":2}
`)
	s := translate.NewStream(translate.Info{Model: "llama3.1", Stream: true}, translate.ResponseOptions{ID: "chatcmpl-1"})
	// The proxy passes its http.ResponseWriter: Copy flushes after each line.
	if err := s.Copy(os.Stdout, ollama); err != nil {
		fmt.Println("stream ended badly:", err)
	}
	// Output:
	// data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1748779200,"model":"llama3.1","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}
	//
	// data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1748779200,"model":"llama3.1","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
	//
	// data: [DONE]
}

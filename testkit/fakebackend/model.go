package fakebackend

import (
	"encoding/json"
	"strings"

	"github.com/ctxproxy/ctxproxy/testkit/vocabgen"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/template"
	"github.com/ollama/ollama/tokenizer"
)

// ModelSpec makes the Ollama fake behave like a real model with a real
// vocabulary: /api/show with "verbose" returns the vocabulary and the
// template, /api/tags its digest, and prompt_eval_count is the rendered
// prompt's length under Ollama's own tokenizer, as a real server counts
// it. Without verbose the vocabulary arrays are left out, as Ollama does.
type ModelSpec struct {
	Vocab    vocabgen.Vocab
	Template string
	Digest   string

	tmpl *template.Template
	tok  tokenizer.Tokenizer
}

// ChatML is the template of the real-Ollama suite's "tiny" model.
const ChatML = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"

func (m *ModelSpec) init(pretokenizer []string) {
	if m.tok != nil {
		return
	}
	if m.Template == "" {
		m.Template = ChatML
	}
	if m.Digest == "" {
		m.Digest = "sha256:fake0001"
	}
	m.tmpl, _ = template.Parse(m.Template)
	v := &tokenizer.Vocabulary{Values: m.Vocab.Tokens, Types: m.Vocab.Types, Scores: m.Vocab.Scores,
		Merges: m.Vocab.Merges, AddBOS: m.Vocab.AddBOS, BOS: []int32{int32(m.Vocab.BOS)}, EOS: []int32{int32(m.Vocab.EOS)}}
	if m.Vocab.Model == "gpt2" {
		m.tok = tokenizer.NewBytePairEncoding(v, pretokenizer...)
	} else {
		m.tok = tokenizer.NewSentencePiece(v)
	}
}

// show is the /api/show answer.
func (m *ModelSpec) show(verbose bool) map[string]any {
	kv := m.Vocab.KV()
	if !verbose {
		for k := range kv {
			switch k {
			case "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.scores":
				kv[k] = nil
			}
		}
	}
	return map[string]any{"template": m.Template, "model_info": kv, "capabilities": []string{"completion", "tools"},
		"details": map[string]any{"family": "llama"}}
}

// promptTokens renders and tokenizes an /api/chat body as Ollama does.
func (m *ModelSpec) promptTokens(body []byte) int {
	var req api.ChatRequest
	if json.Unmarshal(body, &req) != nil {
		return 0
	}
	var b strings.Builder
	if err := m.tmpl.Execute(&b, template.Values{Messages: req.Messages, Tools: req.Tools}); err != nil {
		return 0
	}
	ids, _ := m.tok.Encode(b.String(), true)
	return len(ids)
}

// generateTokens counts an /api/generate prompt as Ollama does: raw as
// it is, else rendered as a system and a user message.
func (m *ModelSpec) generateTokens(prompt, system string, raw bool) int {
	text := prompt
	if !raw {
		var msgs []api.Message
		if system != "" {
			msgs = append(msgs, api.Message{Role: "system", Content: system})
		}
		msgs = append(msgs, api.Message{Role: "user", Content: prompt})
		var b strings.Builder
		if err := m.tmpl.Execute(&b, template.Values{Messages: msgs}); err != nil {
			return 0
		}
		text = b.String()
	}
	ids, _ := m.tok.Encode(text, true)
	return len(ids)
}

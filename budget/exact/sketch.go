package exact

import (
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/ollama/ollama/template"
)

// rendering is the part of a Tokenizer that renders prompts, built from
// what a plain /api/show answer has (no vocabulary): the template or
// renderer, the Modelfile's SYSTEM and MESSAGE lines, the capabilities,
// and the server version's rules.
func rendering(show Show) (*Tokenizer, error) {
	kv := show.modelInfo()
	rules := rulesOf(show.Version)
	renderer, err := RendererOf(show)
	// From 0.30 the renderers change from one version to the next: the
	// server renders the prompts of a model that has one (ServerRenders).
	serverRenders := rules.llamaServer && renderer != ""
	if err != nil && !serverRenders {
		return nil, err
	}
	m := &Tokenizer{
		renderer:      renderer,
		serverRenders: serverRenders,
		standIn:       serverRenders && err != nil,
		rules:         rules,
		// The server drops the <think> part of earlier replies for
		// these (filterThinkTags in its routes).
		dropThinking: show.Details.Family == "qwen3" || ollamaModelName(show.Name) == "deepseek-r1",
		system:       show.System,
		preamble:     show.Messages,
		thinking:     slices.Contains(show.Capabilities, "thinking"),
		vision:       slices.Contains(show.Capabilities, "vision"),
		images:       imagesOf(kv),
		projector:    projectorEstimate(show.ProjectorInfo),
		seed:         maphash.MakeSeed(),
	}
	if m.renderer == "" || m.standIn {
		text := cmpOr(show.Template, "{{ .Prompt }}")
		if m.standIn {
			text = chatMLStandIn
		}
		tmpl, err := template.Parse(text)
		if err != nil {
			return nil, fmt.Errorf("exact: parse the chat template: %w", err)
		}
		if m.rules.llamaServer {
			toolsAsJSON(tmpl.Template.Tree)
		}
		m.tmpl = tmpl
	}
	return m, nil
}

// Sketch returns, from a plain /api/show answer (no vocabulary, which
// takes the server a while to send and ctxproxy a while to build), a
// Tokenizer that renders prompts as New's does and whose counts bound
// the server's from above: a byte-level BPE token stands for one byte of
// text or more (a special token's text for several), so a prompt has no
// more tokens than its rendered bytes and BOS and EOS. Its Count is
// never exact, and images are not bounded (their cost is no text). It
// returns an error wrapping ErrUnsupported for a vocabulary of another
// kind, and for a model whose prompts only the server renders.
func Sketch(show Show) (*Tokenizer, error) {
	if model, _ := show.ModelInfo["tokenizer.ggml.model"].(string); model != "gpt2" {
		return nil, fmt.Errorf("%w: no byte bound for tokenizer.ggml.model %q", ErrUnsupported, model)
	}
	m, err := rendering(show)
	if err != nil {
		return nil, err
	}
	if m.serverRenders {
		return nil, fmt.Errorf("%w: the server renders the prompts of renderer %q", ErrUnsupported, m.renderer)
	}
	m.sketch, m.vision = true, false
	m.addBOS, m.addEOS = true, true
	m.name = "bytes"
	return m, nil
}

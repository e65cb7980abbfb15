package exact

import (
	"fmt"
	"strings"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/model/renderers"
	"github.com/ollama/ollama/parser"
	"github.com/ollama/ollama/thinking"
	"github.com/ollama/ollama/types/model"
)

func init() {
	// The server renders an image in a renderer's prompt as an [img]
	// tag (its routes set this on start); so does ctxproxy.
	renderers.RenderImgTags = true
}

// RendererOf returns the renderer that builds show's model's prompts, ""
// for a model that uses its chat template: the renderer field when the
// server fills it, else the RENDERER line of the Modelfile text, which is
// where Ollama v0.17.4 names it (its template then is not what the
// server renders). A renderer this package does not have is an error
// wrapping ErrUnsupported that names it, with the name: such a model is
// never counted with its template, which the server does not use (from
// Ollama 0.30 the server renders it for ctxproxy: ServerRenders).
func RendererOf(show Show) (string, error) {
	name := show.Renderer
	if name == "" && strings.Contains(strings.ToUpper(show.Modelfile), "RENDERER") {
		mf, err := parser.ParseFile(strings.NewReader(show.Modelfile))
		if err != nil {
			return "", fmt.Errorf("%w: the Modelfile text does not parse, so its renderer is unknown: %v", ErrUnsupported, err)
		}
		for _, c := range mf.Commands {
			if c.Name == "renderer" {
				name = strings.TrimSpace(c.Args)
			}
		}
	}
	if name == "" {
		return "", nil
	}
	if !KnownRenderer(name) {
		return name, fmt.Errorf("%w: the model's renderer %q is not one ctxproxy has (it renders as Ollama v0.17.4 does; a newer Ollama has renderers it lacks)",
			ErrUnsupported, name)
	}
	return name, nil
}

// KnownRenderer reports whether name is a renderer this package renders
// with (Ollama v0.17.4's).
func KnownRenderer(name string) bool {
	_, err := renderers.RenderWithRenderer(name, []api.Message{{Role: "user", Content: "x"}}, nil, nil)
	return err == nil || !strings.HasPrefix(err.Error(), "unknown renderer")
}

// withoutThinking drops the <think> part of the assistant messages
// before the last user message, as the server does for the qwen3 family
// and deepseek-r1 models (filterThinkTags in its routes). It copies msgs
// before it changes one.
func withoutThinking(msgs []api.Message) []api.Message {
	last := -1
	for i, m := range msgs {
		if m.Role == "user" {
			last = i
		}
	}
	copied := false
	for i := range last {
		if msgs[i].Role != "assistant" {
			continue
		}
		p := &thinking.Parser{OpeningTag: "<think>", ClosingTag: "</think>"}
		_, content := p.AddContent(msgs[i].Content)
		if !copied {
			msgs, copied = append([]api.Message(nil), msgs...), true
		}
		msgs[i].Content = content
	}
	return msgs
}

// ollamaModelName is the model part of an Ollama model name
// ("registry/namespace/model:tag"), as the server's ParseName finds it.
func ollamaModelName(name string) string {
	return model.ParseName(name).Model
}

package exact

import (
	"strings"
	"text/template/parse"

	"golang.org/x/mod/semver"
)

// What changed in how Ollama counts a prompt, by its version. Each rule
// here was read from Ollama's source of the versions named and checked
// against the real servers in the e2e suite (docs/fidelity.md).
//
// From 0.30 Ollama runs every GGUF model in llama.cpp's llama-server
// instead of its own Go engine, and with it:
//
//   - every architecture is tokenized as llama.cpp tokenizes it (its
//     pre-tokenizer expressions by tokenizer.ggml.pre, its merge order,
//     its BOS rule), where 0.17 ran many on its own engine;
//   - a prompt that starts with the BOS text its renderer writes (or
//     "<bos>") loses it when the file says llama-server adds BOS itself,
//     so that the prompt has one BOS, not two (llm/llama_server.go);
//   - Ollama's compatibility layer gives files its own converter wrote
//     the pre-tokenizer llama.cpp expects (tokenizerPre);
//   - a chat template that prints a tool with {{ . }} prints it as JSON
//     (template.templateTool gained a String method), where 0.17 printed
//     a Go struct.

// NewestChecked is the newest Ollama version whose rules are known; a
// newer server is counted with them (NewerThanChecked).
const NewestChecked = "0.34.3"

// serverRules are the rules of one Ollama version that counting needs.
type serverRules struct {
	// llamaServer: 0.30 and later (see above).
	llamaServer bool
}

// rulesOf returns the rules of Ollama version ("0.34.3"; "" when unknown:
// the newest rules).
func rulesOf(version string) serverRules {
	return serverRules{llamaServer: atLeast(version, "0.30.0")}
}

// atLeast reports whether version is want or later; an unknown or
// unparsable version is taken for the newest.
func atLeast(version, want string) bool {
	v := "v" + strings.TrimPrefix(version, "v")
	if version == "" || !semver.IsValid(v) {
		return true
	}
	return semver.Compare(v, "v"+want) >= 0
}

// NewerThanChecked reports whether Ollama version is newer than any whose
// counting rules ctxproxy knows: it is counted with the newest ones, and
// the proxy says so.
func NewerThanChecked(version string) bool {
	v := "v" + strings.TrimPrefix(version, "v")
	return version != "" && semver.IsValid(v) && semver.Compare(semver.Canonical(v), "v"+NewestChecked) > 0
}

// chatMLStandIn renders a message's share for a renderer ctxproxy lacks:
// its text and a few tokens of structure, close enough for a strategy
// weighing messages; the whole prompt is counted as the server renders it.
const chatMLStandIn = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"

// tokenizerPre returns the tokenizer.ggml.pre value the server's runner
// tokenizes a model of model_info kv with. From 0.30 Ollama's
// compatibility layer (llama/compat in 0.34.3) rewrites it, in memory,
// for files Ollama's own converter wrote: gpt-oss gets GPT-4o's
// pre-tokenizer (its files say "default"), GLM-4.7-Flash GLM-4's, GLM-OCR
// ChatGLM's, Mistral 3 Tekken's and a Llama 3 vocabulary Llama 3's where
// the file says none or "default". embeddedVision: the model's file holds
// its projector (not a file of its own), which marks a Mistral 3 file as
// Ollama's.
func (r serverRules) tokenizerPre(kv map[string]any, embeddedVision bool) string {
	pre, _ := kv["tokenizer.ggml.pre"].(string)
	if !r.llamaServer {
		return pre
	}
	_, hasPre := kv["tokenizer.ggml.pre"]
	unset := pre == "" || pre == "default"
	switch arch, _ := kv["general.architecture"].(string); arch {
	case "gptoss":
		return "gpt-4o"
	case "glm4moelite":
		return "glm4"
	case "glmocr":
		if hasPre {
			return "chatglm-bpe"
		}
	case "mistral3":
		ollamas := embeddedVision
		for _, k := range []string{"mistral3.rope.scaling.beta_fast", "mistral3.rope.scaling.mscale_all_dim", "mistral3.rope.scaling_beta"} {
			_, has := kv[k]
			ollamas = ollamas || has
		}
		if ollamas && unset {
			return "tekken"
		}
	case "llama":
		at := func(i int, s string) bool { return tokenAt(kv, i) == s }
		tmpl, _ := kv["tokenizer.chat_template"].(string)
		markers := at(128006, "<|start_header_id|>") || strings.Contains(tmpl, "<|start_header_id|>") || strings.Contains(tmpl, "<|eot_id|>")
		if unset && at(128009, "<|eot_id|>") && markers {
			return "llama-bpe"
		}
	}
	return pre
}

// leadingBOS is the BOS text each renderer writes first, which
// llama-server's Ollama takes off again (the renderers' LeadingBOS,
// 0.34.3): those of 0.17.4 that write one, and every renderer added
// since, "" for those that write none.
var leadingBOS = map[string]string{
	"cogito":        "<｜begin▁of▁sentence｜>",
	"deepseek3.1":   "<｜begin▁of▁sentence｜>",
	"functiongemma": "<bos>",
	"lfm2":          "<|startoftext|>",
	"lfm2-thinking": "<|startoftext|>",
	// Added after 0.17.4.
	"qwen3.8":           "",
	"ornith":            "",
	"nemotron-3.5-nano": "",
	"gemma4":            "<bos>",
	"gemma4-small":      "<bos>",
	"gemma4-large":      "<bos>",
	"laguna":            "〈|EOS|〉",
	"poolside-v1":       "〈|EOS|〉",
	"cohere":            "<BOS_TOKEN>",
	"glimmer":           "<|begin_of_text|>",
}

// sent returns prompt as the server sends it to its runner: from 0.30,
// without the BOS text the model's renderer (or template) wrote first,
// when the file says its tokenizer adds one (tokenizer.ggml.add_bos_token
// true, or LFM2's and Gemma 4's pre-tokenizers, which add it whatever the
// file says). What else the prompt starts with stays: "<bos>" aside, the
// server takes off only the text the renderer says it writes.
func (r serverRules) sent(prompt, renderer string, e engine) string {
	adds := e.pre == "lfm2" || e.pre == "gemma4" || e.kind == "gemma4" || (e.bosKey != nil && *e.bosKey)
	if !r.llamaServer || !adds {
		return prompt
	}
	bos, listed := leadingBOS[renderer]
	if !listed && renderer != "" && !KnownRenderer(renderer) {
		// A renderer of a newer Ollama than ctxproxy knows: those write
		// the model's own BOS text first.
		bos = e.bosText
	}
	if bos != "" && strings.HasPrefix(prompt, bos) {
		return prompt[len(bos):]
	}
	return strings.TrimPrefix(prompt, "<bos>")
}

// toolsAsJSON rewrites a chat template's tree so that a tool printed
// whole, {{ . }} (or the range's variable, {{ $tool }}) inside
// {{ range .Tools }}, prints as JSON through the template's own json
// function: what Ollama 0.30 and later print, where 0.17 printed the Go
// struct. The JSON is the same bytes (templateTool's String marshals
// itself).
func toolsAsJSON(t *parse.Tree) {
	if t == nil || t.Root == nil {
		return
	}
	var walk func(n parse.Node)
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.IfNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			if rangesOverTools(n.Pipe) {
				elem := ""
				if d := n.Pipe.Decl; len(d) > 0 {
					elem = d[len(d)-1].Ident[0]
				}
				printJSON(t, n.List, elem, true)
			}
			walk(n.List)
			walk(n.ElseList)
		}
	}
	walk(t.Root)
}

// rangesOverTools reports whether a range's pipeline is .Tools or $.Tools.
func rangesOverTools(p *parse.PipeNode) bool {
	if p == nil || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return len(a.Ident) == 1 && a.Ident[0] == "Tools"
	case *parse.VariableNode:
		return len(a.Ident) == 2 && a.Ident[0] == "$" && a.Ident[1] == "Tools"
	}
	return false
}

// printJSON makes the actions of list that print the range's element
// whole (dot, while dot is the element, or the variable elem) print it
// through json.
func printJSON(t *parse.Tree, list *parse.ListNode, elem string, dotIsElem bool) {
	if list == nil {
		return
	}
	for _, n := range list.Nodes {
		switch n := n.(type) {
		case *parse.ActionNode:
			p := n.Pipe
			if len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
				continue
			}
			arg := p.Cmds[0].Args[0]
			whole := false
			switch a := arg.(type) {
			case *parse.DotNode:
				whole = dotIsElem
			case *parse.VariableNode:
				whole = elem != "" && len(a.Ident) == 1 && a.Ident[0] == elem
			}
			if whole {
				json := parse.NewIdentifier("json").SetTree(t).SetPos(arg.Position())
				p.Cmds[0].Args = []parse.Node{json, arg}
			}
		case *parse.IfNode:
			printJSON(t, n.List, elem, dotIsElem)
			printJSON(t, n.ElseList, elem, dotIsElem)
		case *parse.WithNode:
			printJSON(t, n.List, elem, false)
			printJSON(t, n.ElseList, elem, dotIsElem)
		case *parse.RangeNode:
			printJSON(t, n.List, elem, false)
			printJSON(t, n.ElseList, elem, dotIsElem)
		}
	}
}

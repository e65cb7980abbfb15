package translate

import (
	"errors"
	"strconv"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// MessagesInfo is what the reply side needs to know about an Anthropic
// Messages request that MessagesRequest translated, and what it left out.
type MessagesInfo struct {
	Info
	// InputTokens is the prompt's size as the proxy counted it, shown in
	// a stream's message_start event: Anthropic's clients read the input
	// tokens there, and Ollama reports its own count only at the end
	// (message_delta carries that one).
	InputTokens int
}

// messagesDrops are the Messages fields left out on purpose, with why.
var messagesDrops = map[string]string{
	"metadata":           "Ollama has no end-user id",
	"service_tier":       "Ollama has no service tiers",
	"container":          "Ollama runs no code containers",
	"mcp_servers":        "Ollama connects to no MCP servers",
	"context_management": "ctxproxy trims the conversation itself",
	"inference_geo":      "Ollama runs where it is",
}

// messagesStrict are the Messages members Ollama's /v1/messages decodes
// (MessagesRequest, 0.17.4 to 0.34.3): a value of the wrong type is its
// 400 too. stop is stop_sequences.
var messagesStrict = map[string]bool{
	"model": true, "max_tokens": true, "messages": true, "system": true, "stream": true,
	"temperature": true, "top_p": true, "top_k": true, "stop": true,
	"tools": true, "tool_choice": true, "thinking": true, "metadata": true, "output_config": true,
}

// MessagesRequest translates an Anthropic Messages API request body (POST
// /v1/messages) into an Ollama /api/chat request body, with num_ctx from
// opts. Errors are *Error values (status 400); send them with
// AnthropicJSON. See FIELDS.md for every field.
func MessagesRequest(body []byte, opts RequestOptions) ([]byte, MessagesInfo, error) {
	var info MessagesInfo
	v, err := jsonscan.Valid(body)
	if err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
		return nil, info, invalid("", "", "the request body must be a JSON object")
	}
	r := request{version: opts.Version, strict: messagesStrict}
	var system, messages, thinking, outputConfig []byte
	_ = jsonscan.Members(v, func(key, val []byte) error {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return nil
		}
		switch k := string(keyBytes(key)); k {
		case "model":
			r.model = val
		case "system":
			system = val
		case "messages":
			messages = val
		case "stream":
			r.stream = val
		case "max_tokens":
			r.maxTokens = val
		case "temperature":
			r.temperature = val
		case "top_p":
			r.topP = val
		case "top_k":
			r.topK = val
		case "stop_sequences":
			r.stop = val
		case "tools":
			r.tools = val
		case "tool_choice":
			r.toolChoice = val
		case "thinking":
			thinking = val
		case "output_config":
			outputConfig = val
		case "think":
			r.think = val
		case "keep_alive":
			r.keepAlive = val
		case "options":
			r.options = val
		default:
			reason := messagesDrops[k]
			if reason == "" {
				reason = "not a Messages field ctxproxy translates"
			}
			info.Dropped = append(info.Dropped, Drop{Field: k, Reason: reason})
		}
		return nil
	})
	if err := checkModel(r.model, &info.Info); err != nil {
		return nil, info, err
	}
	if err := checkStream(r.stream, &info.Info); err != nil {
		return nil, info, err
	}
	// Anthropic requires max_tokens, and so does Ollama's own /v1/messages.
	if r.maxTokens == nil {
		return nil, info, invalid("max_tokens", codeMissing, "max_tokens is required")
	}
	if !isInteger(r.maxTokens) || r.maxTokens[0] == '-' || string(r.maxTokens) == "0" {
		return nil, info, invalid("max_tokens", codeInvalidType, "max_tokens must be a positive integer")
	}
	if r.think == nil {
		if r.think, err = AnthropicThink(thinking, outputConfig, opts.Version); err != nil {
			return nil, info, err
		}
		if opts.NoThinking && r.think != nil && string(r.think) != "false" {
			info.Dropped = append(info.Dropped, Drop{Field: "thinking", Reason: "the model cannot think; Ollama's own /v1/messages drops it too"})
			r.think = nil
		}
	}

	dst := make([]byte, 0, len(body)+256)
	dst = append(dst, `{"model":`...)
	dst = append(dst, r.model...)
	dst = append(dst, `,"messages":`...)
	msgs, err := anthropicMessages(system, messages, &info.Info)
	if err != nil {
		return nil, info, err
	}
	dst = appendOllamaMessages(dst, msgs)
	dst = appendStreamFlag(dst, info.Stream)
	if dst, err = appendAnthropicTools(dst, r.tools, r.toolChoice, &info.Info); err != nil {
		return nil, info, err
	}
	if dst, err = r.appendThink(dst, &info.Info); err != nil {
		return nil, info, err
	}
	dst = r.appendKeepAlive(dst, &info.Info)
	// Anthropic's clients leave sampling to the server unless they say:
	// the model's own defaults, not OpenAI's 1.0.
	opts.ModelSampling = true
	if dst, err = r.appendOptions(dst, opts, &info.Info); err != nil {
		return nil, info, err
	}
	return append(dst, '}'), info, nil
}

// anthropicMessages builds the Ollama messages: the system prompt, then
// one message per Anthropic message, except that the tool_result blocks of
// a user message become Ollama tool messages of their own, placed before
// the rest of that message (Anthropic puts results first, answering the
// tool_use blocks of the assistant message just before).
func anthropicMessages(system, messages []byte, info *Info) ([]ollamaMessage, error) {
	var msgs []ollamaMessage
	if system != nil {
		texts, err := anthropicSystem(system, info)
		if err != nil {
			return nil, err
		}
		if len(texts) > 0 {
			msgs = append(msgs, ollamaMessage{role: "system", texts: texts})
		}
	}
	if messages == nil {
		return nil, invalid("messages", codeMissing, "messages is required")
	}
	if jsonscan.KindOf(messages) != jsonscan.KindArray {
		return nil, invalid("messages", codeInvalidType, "messages must be an array")
	}
	n := 0
	err := jsonscan.Elements(messages, func(i int, raw []byte) error {
		n++
		at := "messages[" + strconv.Itoa(i) + "]"
		if jsonscan.KindOf(raw) != jsonscan.KindObject {
			return invalid(at, codeInvalidType, "a message must be an object")
		}
		f := fields(raw)
		m := ollamaMessage{role: strings.ToLower(str(f["role"]))}
		switch {
		case m.role == "user", m.role == "assistant", m.role == "system":
			// A system entry among the messages (Claude Code sends them)
			// stays where it is, as Ollama's /v1/messages keeps it.
		case f["role"] != nil && jsonscan.KindOf(f["role"]) != jsonscan.KindString:
			return invalid(at+".role", codeInvalidType, `role must be a string`)
		default:
			// Ollama hands any other role (or none) to the chat template
			// as it is.
		}
		content := f["content"]
		switch jsonscan.KindOf(content) {
		case jsonscan.KindString:
			m.texts = [][]byte{content}
			msgs = append(msgs, m)
			return nil
		case jsonscan.KindArray:
		case jsonscan.KindInvalid:
			return invalid(at+".content", codeMissing, "content is required")
		default:
			return invalid(at+".content", codeInvalidType, "content must be a string or an array of content blocks")
		}
		var results []ollamaMessage
		err := jsonscan.Elements(content, func(j int, b []byte) error {
			bat := at + ".content[" + strconv.Itoa(j) + "]"
			if jsonscan.KindOf(b) != jsonscan.KindObject {
				return invalid(bat, codeInvalidType, "a content block must be an object")
			}
			bf := fields(b)
			switch typ := str(bf["type"]); typ {
			case "text":
				if jsonscan.KindOf(bf["text"]) != jsonscan.KindString {
					// Ollama's /v1/messages skips a text block without text.
					info.Dropped = append(info.Dropped, Drop{Field: bat, Reason: "a text block without text"})
					return nil
				}
				m.texts = append(m.texts, bf["text"])
			case "image":
				img, err := anthropicImage(bat, bf["source"])
				if err != nil {
					return err
				}
				m.images = append(m.images, img)
			case "tool_use":
				// Carried on any role, as Ollama's /v1/messages carries it.
				c, err := anthropicCall(bat, bf)
				if err != nil {
					return err
				}
				m.calls = append(m.calls, c)
			case "tool_result":
				// Carried on any role, as Ollama's /v1/messages carries it;
				// a tool_use_id that is not a string is none, as there.
				id := bf["tool_use_id"]
				if jsonscan.KindOf(id) != jsonscan.KindString {
					id = nil
				}
				t := ollamaMessage{role: "tool", toolCallID: id, toolName: lastCallName(msgs, id)}
				if err := anthropicResult(bat+".content", bf["content"], &t, info); err != nil {
					return err
				}
				if string(bf["is_error"]) == "true" {
					info.Dropped = append(info.Dropped, Drop{Field: bat + ".is_error", Reason: "Ollama tool messages have no error flag; the result text is sent as is"})
				}
				results = append(results, t)
			case "thinking":
				if m.role == "assistant" && hasText(bf["thinking"]) {
					m.thinking = bf["thinking"]
				}
			case "redacted_thinking":
				info.Dropped = append(info.Dropped, Drop{Field: bat, Reason: "redacted thinking is Anthropic's ciphertext"})
			case "server_tool_use":
				// A call to a server tool (Ollama runs web_search): a tool
				// call, as Ollama's /v1/messages carries it.
				c, err := anthropicCall(bat, bf)
				if err != nil {
					return err
				}
				m.calls = append(m.calls, c)
			case "web_search_tool_result":
				id := bf["tool_use_id"]
				if jsonscan.KindOf(id) != jsonscan.KindString {
					return invalid(bat+".tool_use_id", codeInvalidType, "tool_use_id must be a string")
				}
				// The call is usually in this same message.
				t := ollamaMessage{role: "tool", toolCallID: id, toolName: lastCallName(append(msgs, m), id)}
				t.texts = [][]byte{jsonscan.AppendString(nil, webSearchResults(bf["content"]))}
				results = append(results, t)
			default:
				// document, search_result, container_upload, …: Ollama's
				// /v1/messages leaves blocks it does not know out.
				info.Dropped = append(info.Dropped, Drop{Field: bat, Reason: "content block type " + strconv.Quote(typ) + " has no Ollama equivalent"})
			}
			return nil
		})
		if err != nil {
			return err
		}
		keep := len(results) == 0 || len(m.texts) > 0 || len(m.images) > 0 || len(m.calls) > 0 || m.thinking != nil
		if m.role == "assistant" {
			// A server tool's results follow its call in the same message.
			if keep {
				msgs = append(msgs, m)
			}
			msgs = append(msgs, results...)
			return nil
		}
		msgs = append(msgs, results...)
		if keep {
			msgs = append(msgs, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, invalid("messages", codeInvalidValue, "messages must not be empty")
	}
	return msgs, nil
}

// anthropicSystem reads the system prompt: a string, or text blocks
// (joined with "\n"; cache_control has no Ollama meaning).
func anthropicSystem(v []byte, info *Info) ([][]byte, error) {
	switch jsonscan.KindOf(v) {
	case jsonscan.KindString:
		if jsonscan.IsEmptyString(v) {
			return nil, nil
		}
		return [][]byte{v}, nil
	case jsonscan.KindArray:
	default:
		return nil, invalid("system", codeInvalidType, "system must be a string or an array of text blocks")
	}
	var texts [][]byte
	err := jsonscan.Elements(v, func(i int, b []byte) error {
		if jsonscan.KindOf(b) != jsonscan.KindObject {
			return invalid("system["+strconv.Itoa(i)+"]", codeInvalidType, "a system block must be an object")
		}
		t := fields(b)["text"]
		if jsonscan.KindOf(t) != jsonscan.KindString {
			// Ollama's /v1/messages keeps the text of the system blocks.
			info.Dropped = append(info.Dropped, Drop{Field: "system[" + strconv.Itoa(i) + "]", Reason: "a system block without text"})
			return nil
		}
		texts = append(texts, t)
		return nil
	})
	return texts, err
}

// anthropicImage reads an image block's source: base64 data is carried;
// a URL or file source would need fetching, which ctxproxy does not do.
func anthropicImage(at string, src []byte) ([]byte, error) {
	if jsonscan.KindOf(src) != jsonscan.KindObject {
		return nil, invalid(at+".source", codeInvalidType, "source must be an object")
	}
	f := fields(src)
	if str(f["type"]) != "base64" {
		return nil, invalid(at+".source.type", codeUnsupportedValue, "only base64 image sources are supported")
	}
	data := f["data"]
	if jsonscan.KindOf(data) != jsonscan.KindString || !validBase64(inside(data)) {
		return nil, invalid(at+".source.data", codeInvalidValue, "data must be standard base64")
	}
	return inside(data), nil
}

// anthropicCall reads a tool_use block; its input object is the arguments.
func anthropicCall(at string, f map[string][]byte) (ollamaCall, error) {
	id, name, input := f["id"], f["name"], f["input"]
	if jsonscan.KindOf(id) != jsonscan.KindString {
		return ollamaCall{}, invalid(at+".id", codeInvalidType, "id must be a string")
	}
	if jsonscan.KindOf(name) != jsonscan.KindString || jsonscan.IsEmptyString(name) {
		return ollamaCall{}, invalid(at+".name", codeInvalidType, "name must be a non-empty string")
	}
	switch jsonscan.KindOf(input) {
	case jsonscan.KindObject:
	default:
		// Ollama's /v1/messages (0.17.4) reads input only when it is an
		// object; 0.34 refuses another one, where ctxproxy is lenient.
		input = []byte("{}")
	}
	return ollamaCall{id: id, name: name, args: input}, nil
}

// anthropicResult reads a tool_result's content (a string, or text and
// image blocks) into t.
func anthropicResult(at string, v []byte, t *ollamaMessage, info *Info) error {
	switch jsonscan.KindOf(v) {
	case jsonscan.KindInvalid:
		return nil
	case jsonscan.KindString:
		t.texts = [][]byte{v}
		return nil
	case jsonscan.KindArray:
	default:
		return invalid(at, codeInvalidType, "content must be a string or an array of content blocks")
	}
	return jsonscan.Elements(v, func(j int, b []byte) error {
		bat := at + "[" + strconv.Itoa(j) + "]"
		f := fields(b)
		switch typ := str(f["type"]); {
		case typ == "text" && jsonscan.KindOf(f["text"]) == jsonscan.KindString:
			t.texts = append(t.texts, f["text"])
		case typ == "image":
			img, err := anthropicImage(bat, f["source"])
			if err != nil {
				return err
			}
			t.images = append(t.images, img)
		default:
			// document, search_result, …: Ollama's /v1/messages keeps
			// only the text of a tool result and leaves the rest out.
			info.Dropped = append(info.Dropped, Drop{Field: bat, Reason: "a tool result carries text and images to Ollama"})
		}
		return nil
	})
}

// appendAnthropicTools writes the custom tools in Ollama's shape (the
// input_schema is the parameters schema) and applies tool_choice. Server
// tools (web search, code execution, …) run on Anthropic's servers: they
// are left out and listed in Dropped.
func appendAnthropicTools(dst, tools, choice []byte, info *Info) ([]byte, error) {
	list, err := toolList(tools, info, toolDialect{
		carried: func(typ string) bool { return typ == "" || typ == "custom" },
		dropped: "server tool %q runs on Anthropic's servers; only custom tools are carried",
		what:    "tool", schema: "input_schema",
	})
	if err != nil {
		return nil, err
	}
	mode, names := "auto", []string(nil)
	if choice != nil {
		if jsonscan.KindOf(choice) != jsonscan.KindObject {
			return nil, invalid("tool_choice", codeInvalidType, "tool_choice must be an object")
		}
		f := fields(choice)
		switch typ := str(f["type"]); typ {
		case "auto", "none":
			mode = typ
		case "any":
			mode = "required"
		case "tool":
			if n := f["name"]; n != nil && jsonscan.KindOf(n) != jsonscan.KindString {
				return nil, invalid("tool_choice.name", codeInvalidType, "tool_choice.name must be a string")
			}
			if name := str(f["name"]); name != "" {
				mode, names = "", []string{name}
			} else {
				info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "names no tool; tools sent as with auto, as Ollama's /v1/messages ignores tool_choice"})
			}
		default:
			// Ollama's /v1/messages ignores tool_choice: so does ctxproxy
			// with one it does not know.
			info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "tool_choice.type " + strconv.Quote(typ) + " is not auto, any, tool or none"})
		}
		if f["disable_parallel_tool_use"] != nil {
			info.Dropped = append(info.Dropped, Drop{Field: "tool_choice.disable_parallel_tool_use", Reason: "Ollama cannot limit calls per turn"})
		}
	}
	return appendChosenTools(dst, list, mode, names, info), nil
}

// AnthropicThink maps a Messages request's thinking and output_config
// members to Ollama's think value (raw JSON, nil for none) as the
// /v1/messages layer of Ollama version does ("" means the newest rules):
//
//   - every version: thinking {"type": "enabled"} (its budget_tokens has
//     no Ollama equivalent) is true;
//   - from 0.24: "disabled" is false, and without either
//     output_config.effort "low", "medium", "high" or "max" ("xhigh" is
//     high; case and spaces do not matter) is that level;
//   - anything else ("adaptive", an unknown type, no thinking) leaves
//     think out: the model's default (a thinking model thinks).
//
// Only a thinking that is not an object is an error, as Ollama refuses
// it when it decodes the request.
func AnthropicThink(thinking, outputConfig []byte, version string) ([]byte, error) {
	typ := ""
	if thinking != nil {
		if jsonscan.KindOf(thinking) != jsonscan.KindObject {
			return nil, invalid("thinking", codeInvalidType, "thinking must be an object")
		}
		typ = str(fields(thinking)["type"])
	}
	newer := version == "" || semver.Compare("v"+version, "v0.24.0") >= 0
	switch {
	case typ == "enabled":
		return []byte("true"), nil
	case typ == "disabled" && newer:
		return []byte("false"), nil
	case !newer || jsonscan.KindOf(outputConfig) != jsonscan.KindObject:
		return nil, nil
	}
	effort := strings.ToLower(strings.TrimSpace(str(fields(outputConfig)["effort"])))
	switch effort {
	case "xhigh":
		return []byte(`"high"`), nil
	case "low", "medium", "high", "max":
		return jsonscan.AppendString(nil, effort), nil
	}
	return nil, nil
}

// errStop ends a walk over elements early.
var errStop = errors.New("stop")

// webSearchResults writes a web_search_tool_result's content as Ollama's
// /v1/messages does: a line "- title: url" per result, or the error code.
func webSearchResults(v []byte) string {
	var b strings.Builder
	errorText := func(f map[string][]byte) string {
		if code := str(f["error_code"]); code != "" {
			return "web_search_tool_result_error: " + code
		}
		return "web_search_tool_result_error"
	}
	switch jsonscan.KindOf(v) {
	case jsonscan.KindString:
		return str(v)
	case jsonscan.KindObject:
		if f := fields(v); str(f["type"]) == "web_search_tool_result_error" {
			return errorText(f)
		}
		return string(v)
	case jsonscan.KindArray:
		stop := false
		_ = jsonscan.Elements(v, func(_ int, item []byte) error {
			f := fields(item)
			switch str(f["type"]) {
			case "web_search_result":
				b.WriteString("- " + str(f["title"]) + ": " + str(f["url"]) + "\n")
			case "web_search_tool_result_error":
				b.Reset()
				b.WriteString(errorText(f))
				stop = true
			}
			if stop {
				return errStop
			}
			return nil
		})
	}
	return b.String()
}

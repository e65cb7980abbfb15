package translate

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// ResponsesInfo is what the reply side needs to know about a Responses
// request that ResponsesRequest translated, and what it left out.
type ResponsesInfo struct {
	Info
	// echo holds the request values the response object repeats, as the
	// client sent them (raw JSON tokens; nil when absent).
	instructions, tools, toolChoice, format, temperature, topP []byte
	maxOutputTokens, metadata, reasoning, parallelToolCalls    []byte
}

// responsesDrops are the Responses fields left out on purpose, with why.
var responsesDrops = map[string]string{
	"store":               "Ollama keeps no responses; the reply says store: false",
	"metadata":            "Ollama keeps no responses; echoed in the reply only",
	"include":             "Ollama has no extra outputs to include",
	"truncation":          "ctxproxy trims the conversation itself",
	"user":                "Ollama has no end-user id",
	"safety_identifier":   "Ollama has no end-user id",
	"prompt_cache_key":    "Ollama caches prompt prefixes on its own",
	"service_tier":        "Ollama has no service tiers",
	"parallel_tool_calls": "Ollama cannot limit calls per turn",
	"max_tool_calls":      "Ollama cannot limit calls per turn",
	"top_logprobs":        "not carried for the Responses API",
	"stream_options":      "no Ollama equivalent",
}

// responsesStrict are the Responses members Ollama's /v1/responses
// decodes (ResponsesRequest, 0.17.4 to 0.34.3): a value of the wrong type
// is its 400 too. From 0.22 it maps reasoning.effort to think and refuses
// an effort it does not know; before, it ignores it.
func responsesStrict(version string) map[string]bool {
	strict := map[string]bool{
		"model": true, "input": true, "instructions": true, "stream": true,
		"max_output_tokens": true, "temperature": true, "top_p": true,
		"text": true, "tools": true, "include": true, "truncation": true,
	}
	if atLeast(version, "0.22.0") {
		strict["reasoning"] = true
	}
	return strict
}

// hostedItemsVersion is the first Ollama version whose /v1/responses
// takes web_search_call and tool_search items (0.32.0 refuses them,
// 0.34.3 takes them).
const hostedItemsVersion = "0.33.0"

// ResponsesRequest translates an OpenAI Responses API request body (POST
// /v1/responses) into an Ollama /api/chat request body, with num_ctx from
// opts. Errors are *Error values in OpenAI's shape (status 400), ready to
// send; see FIELDS.md for every field.
//
// Requests that point at state kept by OpenAI's servers
// (previous_response_id, conversation, prompt, item_reference items) are
// refused: Ollama keeps none, and answering without that state would give
// the client an answer to a conversation it did not send.
func ResponsesRequest(body []byte, opts RequestOptions) ([]byte, ResponsesInfo, error) {
	var info ResponsesInfo
	v, err := jsonscan.Valid(body)
	if err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
		return nil, info, invalid("", "", "the request body must be a JSON object")
	}
	r := request{version: opts.Version, strict: responsesStrict(opts.Version)}
	var input, text []byte
	var bad error
	_ = jsonscan.Members(v, func(key, val []byte) error {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return nil
		}
		k := string(keyBytes(key))
		switch k {
		case "model":
			r.model = val
		case "input":
			input = val
		case "instructions":
			info.instructions = val
		case "stream":
			r.stream = val
		case "temperature":
			r.temperature, info.temperature = val, val
		case "top_p":
			r.topP, info.topP = val, val
		case "top_k":
			r.topK = val
		case "min_p":
			r.minP = val
		case "repeat_penalty":
			r.repeatPenalty = val
		case "presence_penalty":
			r.presencePenalty = val
		case "frequency_penalty":
			r.frequencyPenalty = val
		case "seed":
			r.seed = val
		case "max_output_tokens":
			r.maxTokens, info.maxOutputTokens = val, val
		case "tools":
			r.tools, info.tools = val, val
		case "tool_choice":
			r.toolChoice, info.toolChoice = val, val
		case "text":
			text = val
		case "reasoning":
			r.reasoning, info.reasoning = val, val
		case "think":
			r.think = val
		case "keep_alive":
			r.keepAlive = val
		case "options":
			r.options = val
		case "previous_response_id", "conversation", "prompt":
			bad = invalid(k, codeUnsupportedParam, k+" refers to state kept by OpenAI's servers, which Ollama does not have; "+
				"send the whole conversation in input")
			return bad
		case "background":
			if string(val) == "true" {
				bad = invalid(k, codeUnsupportedValue, "background responses are not supported: Ollama answers while the request is open")
				return bad
			}
		default:
			if k == "metadata" {
				info.metadata = val
			}
			if k == "parallel_tool_calls" {
				info.parallelToolCalls = val
			}
			reason := responsesDrops[k]
			if reason == "" {
				reason = "not a Responses field ctxproxy translates"
			}
			info.Dropped = append(info.Dropped, Drop{Field: k, Reason: reason})
		}
		return nil
	})
	if bad != nil {
		return nil, info, bad
	}
	if err := checkModel(r.model, &info.Info); err != nil {
		return nil, info, err
	}
	if err := checkStream(r.stream, &info.Info); err != nil {
		return nil, info, err
	}
	if r.maxTokens != nil && !isInteger(r.maxTokens) {
		return nil, info, invalid("max_output_tokens", codeInvalidType, "max_output_tokens must be an integer")
	}

	dst := make([]byte, 0, len(body)+256)
	dst = append(dst, `{"model":`...)
	dst = append(dst, r.model...)
	dst = append(dst, `,"messages":`...)
	msgs, err := responsesMessages(info.instructions, input, r.version, &info.Info)
	if err != nil {
		return nil, info, err
	}
	dst = appendOllamaMessages(dst, msgs)
	dst = appendStreamFlag(dst, info.Stream)
	if dst, info.format, err = appendResponsesFormat(dst, text, &info.Info); err != nil {
		return nil, info, err
	}
	if dst, err = appendResponsesTools(dst, r.tools, r.toolChoice, &info.Info); err != nil {
		return nil, info, err
	}
	if dst, err = r.appendThink(dst, &info.Info); err != nil {
		return nil, info, err
	}
	dst = r.appendKeepAlive(dst, &info.Info)
	if dst, err = r.appendOptions(dst, opts, &info.Info); err != nil {
		return nil, info, err
	}
	return append(dst, '}'), info, nil
}

// responsesMessages builds the Ollama messages: instructions as the system
// message, then the input, a string (one user message) or a list of items.
// Function calls join the assistant message before them and reasoning
// becomes the thinking of the assistant message after it, as Ollama's own
// Responses layer pairs them.
func responsesMessages(instructions, input []byte, version string, info *Info) ([]ollamaMessage, error) {
	var msgs []ollamaMessage
	switch jsonscan.KindOf(instructions) {
	case jsonscan.KindInvalid:
	case jsonscan.KindString:
		if !jsonscan.IsEmptyString(instructions) {
			msgs = append(msgs, ollamaMessage{role: "system", texts: [][]byte{instructions}})
		}
	default:
		return nil, invalid("instructions", codeInvalidType, "instructions must be a string")
	}
	switch jsonscan.KindOf(input) {
	case jsonscan.KindInvalid:
		return msgs, nil // the instructions alone, as Ollama's /v1/responses reads it
	case jsonscan.KindString:
		return append(msgs, ollamaMessage{role: "user", texts: [][]byte{input}}), nil
	case jsonscan.KindArray:
	default:
		return nil, invalid("input", codeInvalidType, "input must be a string or an array of items")
	}
	var thinking [][]byte // reasoning waiting for its assistant message
	attach := func(m *ollamaMessage) {
		if len(thinking) > 0 {
			m.thinking = appendJoined(nil, thinking)
			thinking = nil
		}
	}
	err := jsonscan.Elements(input, func(i int, item []byte) error {
		at := "input[" + strconv.Itoa(i) + "]"
		if jsonscan.KindOf(item) != jsonscan.KindObject {
			return invalid(at, codeInvalidType, "an input item must be an object")
		}
		f := fields(item)
		typ := str(f["type"])
		if typ == "" && f["role"] != nil {
			typ = "message" // the short form {"role","content"}
		}
		switch typ {
		case "message":
			m, err := responsesMessage(at, f, info)
			if err != nil {
				return err
			}
			if m.role == "assistant" {
				attach(&m)
			}
			msgs = append(msgs, m)
		case "function_call":
			c, err := responsesCall(at, f)
			if err != nil {
				return err
			}
			if n := len(msgs); n > 0 && msgs[n-1].role == "assistant" {
				msgs[n-1].calls = append(msgs[n-1].calls, c)
				attach(&msgs[n-1])
			} else {
				m := ollamaMessage{role: "assistant", calls: []ollamaCall{c}}
				attach(&m)
				msgs = append(msgs, m)
			}
		case "function_call_output":
			id := f["call_id"]
			if id != nil && jsonscan.KindOf(id) != jsonscan.KindString {
				return invalid(at+".call_id", codeInvalidType, "call_id must be a string")
			}
			texts, images, err := responsesParts(at+".output", f["output"], true, info)
			if err != nil {
				return err
			}
			msgs = append(msgs, ollamaMessage{role: "tool", texts: texts, images: images,
				toolCallID: id, toolName: lastCallName(msgs, id)})
		case "reasoning":
			thinking = append(thinking, reasoningTexts(f)...)
		case "agent_message":
			// A message between Codex's agents: a user message under the
			// envelope Ollama's /v1/responses writes (0.34 and later; an
			// older one refuses the item, where ctxproxy is lenient).
			texts, images, err := responsesParts(at+".content", f["content"], true, info)
			if err != nil {
				return err
			}
			if author, recipient := str(f["author"]), str(f["recipient"]); author != "" || recipient != "" {
				head := fmt.Sprintf("Agent message from %q to %q:", author, recipient)
				texts = append([][]byte{jsonscan.AppendString(nil, head)}, texts...)
			}
			msgs = append(msgs, ollamaMessage{role: "user", texts: texts, images: images})
		case "web_search_call", "tool_search_call", "tool_search_output":
			// A hosted tool's call: history for OpenAI's servers. Ollama's
			// /v1/responses skips web_search_call from 0.33 on (and carries
			// Codex's tool search, a hosted tool ctxproxy does not send);
			// before, it refuses these items, as ctxproxy does then.
			if !atLeast(version, hostedItemsVersion) {
				return invalid(at+".type", codeUnsupportedValue, "input item type "+strconv.Quote(typ)+" cannot be carried to Ollama "+version+"; "+
					"supported: message, function_call, function_call_output, reasoning")
			}
			info.Dropped = append(info.Dropped, Drop{Field: at, Reason: "a hosted tool's item; the model sees the messages around it"})
		case "item_reference":
			return invalid(at+".type", codeUnsupportedValue, "item_reference refers to items kept by OpenAI's servers, which Ollama does not have; send the items themselves")
		case "":
			return invalid(at+".type", codeMissing, "an input item needs a type")
		default:
			return invalid(at+".type", codeUnsupportedValue, "input item type "+strconv.Quote(typ)+" cannot be carried to Ollama; "+
				"supported: message, function_call, function_call_output, reasoning")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(thinking) > 0 {
		// Reasoning with nothing after it stays an assistant turn of its own.
		m := ollamaMessage{role: "assistant"}
		attach(&m)
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// responsesMessage reads a message item.
func responsesMessage(at string, f map[string][]byte, info *Info) (ollamaMessage, error) {
	role := f["role"]
	var m ollamaMessage
	if role != nil && jsonscan.KindOf(role) != jsonscan.KindString {
		return m, invalid(at+".role", codeInvalidType, "role must be a string")
	}
	switch m.role = strings.ToLower(str(role)); m.role {
	case "developer":
		m.role = "system"
	default:
		// user, assistant, system; any other role (or none) is handed to
		// the template as it is, as Ollama's /v1/responses does.
	}
	content, ok := f["content"]
	if !ok {
		return m, nil // an empty message, as Ollama's /v1/responses reads it
	}
	var err error
	m.texts, m.images, err = responsesParts(at+".content", content, false, info)
	return m, err
}

// responsesParts reads a content value, a string or an array of parts,
// into text tokens and image data. output marks a function_call_output's
// output, where a missing value means an empty result.
func responsesParts(at string, v []byte, output bool, info *Info) ([][]byte, [][]byte, error) {
	switch jsonscan.KindOf(v) {
	case jsonscan.KindString:
		return [][]byte{v}, nil, nil
	case jsonscan.KindArray:
	case jsonscan.KindInvalid:
		if output {
			return nil, nil, nil
		}
		return nil, nil, invalid(at, codeMissing, "content is required")
	default:
		return nil, nil, invalid(at, codeInvalidType, "content must be a string or an array of content parts")
	}
	var texts, images [][]byte
	err := jsonscan.Elements(v, func(j int, p []byte) error {
		pat := at + "[" + strconv.Itoa(j) + "]"
		if jsonscan.KindOf(p) != jsonscan.KindObject {
			return invalid(pat, codeInvalidType, "a content part must be an object")
		}
		pf := fields(p)
		switch typ := str(pf["type"]); typ {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			if jsonscan.KindOf(pf["text"]) != jsonscan.KindString {
				// Ollama's /v1/responses reads a missing text as "".
				info.Dropped = append(info.Dropped, Drop{Field: pat, Reason: "a text part without text"})
				return nil
			}
			texts = append(texts, pf["text"])
		case "refusal":
			if jsonscan.KindOf(pf["refusal"]) != jsonscan.KindString {
				return invalid(pat+".refusal", codeInvalidType, "refusal must be a string")
			}
			texts = append(texts, pf["refusal"])
		case "input_image":
			url, ok := pf["image_url"]
			if !ok || string(url) == `""` {
				// A file_id names OpenAI's file store: Ollama's
				// /v1/responses skips such an image too.
				info.Dropped = append(info.Dropped, Drop{Field: pat, Reason: "an image without image_url (file_id needs OpenAI's file store)"})
				return nil
			}
			img, err := imageData(url)
			if err != nil {
				err.Param = pat + ".image_url" + err.Param
				return err
			}
			images = append(images, img)
		case "input_file", "input_audio":
			return invalid(pat+".type", codeUnsupportedValue, "only text and image content parts are supported")
		case "":
			return invalid(pat+".type", codeMissing, "a content part needs a type")
		default:
			return invalid(pat+".type", codeInvalidValue, "content part type "+strconv.Quote(typ)+" is not supported")
		}
		return nil
	})
	return texts, images, err
}

// responsesCall reads a function_call item; its arguments, a string of
// JSON, become the object Ollama expects.
func responsesCall(at string, f map[string][]byte) (ollamaCall, error) {
	id, name := f["call_id"], f["name"]
	if id != nil && jsonscan.KindOf(id) != jsonscan.KindString {
		return ollamaCall{}, invalid(at+".call_id", codeInvalidType, "call_id must be a string")
	}
	switch jsonscan.KindOf(name) {
	case jsonscan.KindString:
	case jsonscan.KindInvalid:
		name = []byte(`""`) // Ollama's /v1 forwards a call without a name
	default:
		return ollamaCall{}, invalid(at+".name", codeInvalidType, "name must be a string")
	}
	args, msg := appendArguments(nil, f["arguments"])
	if msg != "" {
		return ollamaCall{}, invalid(at+".arguments", codeInvalidValue, msg)
	}
	return ollamaCall{id: id, name: name, args: args}, nil
}

// reasoningTexts returns the readable text of a reasoning item: its
// summary, else its reasoning_text content. encrypted_content is opaque
// (OpenAI's ciphertext) and not carried; Ollama's own Responses layer puts
// the same text in summary and encrypted_content, so the summary is enough.
func reasoningTexts(f map[string][]byte) [][]byte {
	for _, key := range []string{"summary", "content"} {
		var texts [][]byte
		if jsonscan.KindOf(f[key]) != jsonscan.KindArray {
			continue
		}
		_ = jsonscan.Elements(f[key], func(_ int, p []byte) error {
			if jsonscan.KindOf(p) == jsonscan.KindObject {
				if t := fields(p)["text"]; hasText(t) {
					texts = append(texts, t)
				}
			}
			return nil
		})
		if len(texts) > 0 {
			return texts
		}
	}
	return nil
}

// appendResponsesFormat maps text.format: json_object to "json", a
// json_schema's schema to the schema itself. It returns the format value
// to echo in the reply.
func appendResponsesFormat(dst, text []byte, info *Info) ([]byte, []byte, error) {
	if text == nil {
		return dst, nil, nil
	}
	if jsonscan.KindOf(text) != jsonscan.KindObject {
		return nil, nil, invalid("text", codeInvalidType, "text must be an object")
	}
	var format []byte
	_ = jsonscan.Members(text, func(key, val []byte) error {
		switch {
		case jsonscan.KindOf(val) == jsonscan.KindNull:
		case jsonscan.KeyIs(key, "format"):
			format = val
		default:
			info.Dropped = append(info.Dropped, Drop{Field: "text." + jsonscan.KeyName(key), Reason: "no Ollama equivalent"})
		}
		return nil
	})
	if format == nil {
		return dst, nil, nil
	}
	if jsonscan.KindOf(format) != jsonscan.KindObject {
		return nil, nil, invalid("text.format", codeInvalidType, "text.format must be an object")
	}
	f := fields(format)
	if t := f["type"]; t != nil && jsonscan.KindOf(t) != jsonscan.KindString {
		return nil, nil, invalid("text.format.type", codeInvalidType, "text.format.type must be a string")
	}
	dst, err := appendFormatType(dst, "text.format", "text.format.schema", str(f["type"]), f["schema"], info)
	return dst, format, err
}

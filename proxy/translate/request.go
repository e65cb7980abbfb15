package translate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// RequestOptions tune Request. The zero value sends what Ollama's own /v1
// endpoint would, plus nothing for num_ctx.
type RequestOptions struct {
	// NumCtx is the context window to ask Ollama for (options.num_ctx), as
	// the proxy's sizer chose it; 0 leaves the client's own (from an
	// "options" extra) or Ollama's default. This is the reason the
	// translation exists: Ollama's /v1 layer has no way to set it (Ollama
	// #5356, #2722).
	NumCtx int
	// ModelSampling leaves temperature and top_p to the model's Modelfile
	// defaults when the client omits them. Without it they are set to 1.0,
	// OpenAI's defaults and what Ollama's own /v1 endpoint sends, so a
	// client sees the same sampling through ctxproxy as without it.
	ModelSampling bool
}

// Info is what the response side needs to know about a translated request,
// and what the translation left out.
type Info struct {
	// Model is the requested model.
	Model string
	// Stream reports whether the client asked for a stream (OpenAI's
	// default is false; Ollama's is true, so the Ollama body always says).
	Stream bool
	// IncludeUsage is stream_options.include_usage: the stream ends with a
	// usage chunk.
	IncludeUsage bool
	// Dropped lists the fields that have no Ollama equivalent and were
	// left out, for the proxy to log at debug level. Null values are
	// treated as absent and not listed.
	Dropped []Drop
}

// Drop is one request field left out of the Ollama request.
type Drop struct {
	// Field is the field's path, such as "logit_bias" or "messages[3].name".
	Field string `json:"field"`
	// Reason says why, in a few words.
	Reason string `json:"reason"`
}

// request holds the raw values of the top-level fields Request reads.
type request struct {
	model, messages, stream, streamOptions                        []byte
	temperature, topP, topK, minP, repeatPenalty                  []byte
	presencePenalty, frequencyPenalty, seed, stop                 []byte
	maxTokens, maxCompletionTokens                                []byte
	tools, toolChoice, responseFormat                             []byte
	reasoningEffort, reasoning, think, keepAlive, options         []byte
	logprobs, topLogprobs, n, modalities, functions, functionCall []byte
}

// dropReasons are the OpenAI fields Request leaves out on purpose, with why.
var dropReasons = map[string]string{
	"logit_bias":          "Ollama has no token biasing",
	"user":                "Ollama has no end-user id",
	"safety_identifier":   "Ollama has no end-user id",
	"prompt_cache_key":    "Ollama caches prompts by prefix on its own",
	"parallel_tool_calls": "Ollama cannot limit tool calls per turn",
	"service_tier":        "Ollama has no service tiers",
	"store":               "Ollama stores nothing",
	"metadata":            "Ollama stores nothing",
	"prediction":          "Ollama has no predicted outputs",
	"web_search_options":  "Ollama has no web search",
	"verbosity":           "Ollama has no verbosity control",
	"audio":               "Ollama has no audio output",
}

// Request translates an OpenAI chat completion request body into an Ollama
// /api/chat request body. The proxy calls it on the (already rewritten)
// body of a POST /v1/chat/completions bound for an Ollama backend, forwards
// the result to /api/chat, and keeps the Info for the response side.
//
// Input it cannot translate (malformed JSON, wrong types, unknown roles, a
// value Ollama cannot honour such as n > 1 or an http image URL) returns a
// *Error with status 400, ready to send. Fields with no Ollama equivalent
// that can safely be ignored are dropped and listed in Info.Dropped;
// FIELDS.md has the table of every field and what happens to it.
func Request(body []byte, opts RequestOptions) ([]byte, Info, error) {
	var info Info
	v, err := jsonscan.Valid(body)
	if err != nil {
		return nil, info, invalid("", "", "the request body is not valid JSON")
	}
	if jsonscan.KindOf(v) != jsonscan.KindObject {
		return nil, info, invalid("", codeInvalidType, "the request body must be a JSON object")
	}
	var r request
	err = jsonscan.Members(v, func(key, val []byte) error {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return nil // null means absent, as OpenAI treats it
		}
		k := keyBytes(key)
		switch string(k) {
		case "model":
			r.model = val
		case "messages":
			r.messages = val
		case "stream":
			r.stream = val
		case "stream_options":
			r.streamOptions = val
		case "temperature":
			r.temperature = val
		case "top_p":
			r.topP = val
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
		case "stop":
			r.stop = val
		case "max_tokens":
			r.maxTokens = val
		case "max_completion_tokens":
			r.maxCompletionTokens = val
		case "tools":
			r.tools = val
		case "tool_choice":
			r.toolChoice = val
		case "response_format":
			r.responseFormat = val
		case "reasoning_effort":
			r.reasoningEffort = val
		case "reasoning":
			r.reasoning = val
		case "think":
			r.think = val
		case "keep_alive":
			r.keepAlive = val
		case "options":
			r.options = val
		case "logprobs":
			r.logprobs = val
		case "top_logprobs":
			r.topLogprobs = val
		case "n":
			r.n = val
		case "modalities":
			r.modalities = val
		case "functions":
			r.functions = val
		case "function_call":
			r.functionCall = val
		default:
			reason, ok := dropReasons[string(k)]
			if !ok {
				reason = "not an OpenAI chat field ctxproxy translates"
			}
			info.Dropped = append(info.Dropped, Drop{Field: string(k), Reason: reason})
		}
		return nil
	})
	if err != nil {
		return nil, info, invalid("", "", "the request body is not valid JSON")
	}
	out, err := r.translate(make([]byte, 0, len(body)+256), opts, &info)
	if err != nil {
		return nil, info, err
	}
	return out, info, nil
}

// translate checks the fields and writes the Ollama request.
func (r *request) translate(dst []byte, opts RequestOptions, info *Info) ([]byte, error) {
	if err := r.unsupported(); err != nil {
		return nil, err
	}

	if r.model == nil {
		return nil, invalid("model", codeMissing, "model is required")
	}
	if jsonscan.KindOf(r.model) != jsonscan.KindString || jsonscan.IsEmptyString(r.model) {
		return nil, invalid("model", codeInvalidType, "model must be a non-empty string")
	}
	info.Model, _ = jsonscan.Unquote(r.model)

	if r.stream != nil {
		if jsonscan.KindOf(r.stream) != jsonscan.KindBool {
			return nil, invalid("stream", codeInvalidType, "stream must be a boolean")
		}
		info.Stream = r.stream[0] == 't'
	}
	if r.streamOptions != nil {
		include, err := r.includeUsage(info)
		if err != nil {
			return nil, err
		}
		info.IncludeUsage = include && info.Stream
	}

	dst = append(dst, `{"model":`...)
	dst = append(dst, r.model...)
	dst = append(dst, `,"messages":`...)
	var err error
	if dst, err = appendMessages(dst, r.messages, info); err != nil {
		return nil, err
	}
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, info.Stream)

	if dst, err = r.appendFormat(dst); err != nil {
		return nil, err
	}
	if dst, err = r.appendTools(dst, info); err != nil {
		return nil, err
	}
	if dst, err = r.appendThink(dst, info); err != nil {
		return nil, err
	}
	if r.keepAlive != nil {
		if k := jsonscan.KindOf(r.keepAlive); k != jsonscan.KindString && k != jsonscan.KindNumber {
			return nil, invalid("keep_alive", codeInvalidType, "keep_alive must be a duration string or a number of seconds")
		}
		dst = append(dst, `,"keep_alive":`...)
		dst = append(dst, r.keepAlive...)
	}
	if r.logprobs != nil {
		if jsonscan.KindOf(r.logprobs) != jsonscan.KindBool {
			return nil, invalid("logprobs", codeInvalidType, "logprobs must be a boolean")
		}
		if r.logprobs[0] == 't' {
			dst = append(dst, `,"logprobs":true`...)
		}
	}
	if r.topLogprobs != nil {
		if !isInteger(r.topLogprobs) {
			return nil, invalid("top_logprobs", codeInvalidType, "top_logprobs must be an integer")
		}
		dst = append(dst, `,"top_logprobs":`...)
		dst = append(dst, r.topLogprobs...)
	}
	if dst, err = r.appendOptions(dst, opts); err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// unsupported rejects the fields whose request cannot be honoured and
// must not be silently ignored.
func (r *request) unsupported() error {
	if r.n != nil {
		if jsonscan.KindOf(r.n) != jsonscan.KindNumber {
			return invalid("n", codeInvalidType, "n must be an integer")
		}
		if string(r.n) != "1" {
			return invalid("n", codeUnsupportedValue, "n must be 1: Ollama returns a single choice")
		}
	}
	if r.functions != nil {
		return invalid("functions", codeUnsupportedParam, "the legacy functions parameter is not supported; use tools")
	}
	if r.functionCall != nil {
		return invalid("function_call", codeUnsupportedParam, "the legacy function_call parameter is not supported; use tool_choice")
	}
	if r.modalities != nil {
		if jsonscan.KindOf(r.modalities) != jsonscan.KindArray {
			return invalid("modalities", codeInvalidType, "modalities must be an array")
		}
		var err error
		_ = jsonscan.Elements(r.modalities, func(_ int, m []byte) error {
			if string(m) != `"text"` {
				err = invalid("modalities", codeUnsupportedValue, "only text output is supported")
			}
			return err
		})
		return err
	}
	return nil
}

func (r *request) includeUsage(info *Info) (bool, error) {
	if jsonscan.KindOf(r.streamOptions) != jsonscan.KindObject {
		return false, invalid("stream_options", codeInvalidType, "stream_options must be an object")
	}
	var include bool
	var bad error
	_ = jsonscan.Members(r.streamOptions, func(key, val []byte) error {
		switch {
		case jsonscan.KindOf(val) == jsonscan.KindNull:
		case jsonscan.KeyIs(key, "include_usage"):
			if jsonscan.KindOf(val) != jsonscan.KindBool {
				bad = invalid("stream_options.include_usage", codeInvalidType, "include_usage must be a boolean")
				return bad
			}
			include = val[0] == 't'
		default:
			info.Dropped = append(info.Dropped, Drop{Field: "stream_options." + jsonscan.KeyName(key), Reason: "no Ollama equivalent"})
		}
		return nil
	})
	return include, bad
}

// appendFormat maps response_format to Ollama's format: "json" for
// json_object, the schema itself for json_schema.
func (r *request) appendFormat(dst []byte) ([]byte, error) {
	if r.responseFormat == nil {
		return dst, nil
	}
	if jsonscan.KindOf(r.responseFormat) != jsonscan.KindObject {
		return nil, invalid("response_format", codeInvalidType, "response_format must be an object")
	}
	var typ, schema []byte
	_ = jsonscan.Members(r.responseFormat, func(key, val []byte) error {
		switch {
		case jsonscan.KeyIs(key, "type"):
			typ = val
		case jsonscan.KeyIs(key, "json_schema") && jsonscan.KindOf(val) == jsonscan.KindObject:
			_ = jsonscan.Members(val, func(k, v []byte) error {
				if jsonscan.KeyIs(k, "schema") && jsonscan.KindOf(v) != jsonscan.KindNull {
					schema = v
				}
				return nil
			})
		}
		return nil
	})
	switch string(typ) {
	case `"text"`:
		return dst, nil
	case `"json_object"`:
		return append(dst, `,"format":"json"`...), nil
	case `"json_schema"`:
		if schema == nil {
			// A json_schema without a schema still asks for JSON.
			return append(dst, `,"format":"json"`...), nil
		}
		if jsonscan.KindOf(schema) != jsonscan.KindObject {
			return nil, invalid("response_format.json_schema.schema", codeInvalidType, "schema must be an object")
		}
		dst = append(dst, `,"format":`...)
		return append(dst, schema...), nil
	case "":
		return nil, invalid("response_format.type", codeMissing, "response_format.type is required")
	}
	return nil, invalid("response_format.type", codeUnsupportedValue, "response_format.type must be text, json_object or json_schema")
}

// appendTools forwards the function tools as they are (Ollama's tool shape
// is OpenAI's) and applies tool_choice as far as Ollama can: "none" sends
// no tools, a named function (or an allowed_tools list) sends only those
// tools; "auto" and "required" send all of them, since Ollama cannot force
// a call.
func (r *request) appendTools(dst []byte, info *Info) ([]byte, error) {
	choice, allowed, err := r.choice()
	if err != nil {
		return nil, err
	}
	if r.tools == nil {
		if choice == "required" || allowed != nil {
			return nil, invalid("tool_choice", codeInvalidValue, "tool_choice needs tools")
		}
		return dst, nil
	}
	if jsonscan.KindOf(r.tools) != jsonscan.KindArray {
		return nil, invalid("tools", codeInvalidType, "tools must be an array")
	}
	type tool struct {
		name string
		raw  []byte
	}
	var tools []tool
	err = jsonscan.Elements(r.tools, func(i int, t []byte) error {
		name, err := toolName(t, "tools["+strconv.Itoa(i)+"]")
		if err != nil {
			return err
		}
		tools = append(tools, tool{name, t})
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case choice == "none":
		info.Dropped = append(info.Dropped, Drop{Field: "tools", Reason: `tool_choice is "none"`})
		return dst, nil
	case choice == "required":
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "Ollama cannot force a tool call; tools sent as with auto"})
	case allowed != nil:
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "Ollama cannot force a tool call; only the chosen tools sent"})
		kept := tools[:0]
		for _, t := range tools {
			for _, a := range allowed {
				if t.name == a {
					kept = append(kept, t)
					break
				}
			}
		}
		if len(kept) == 0 {
			return nil, invalid("tool_choice", codeInvalidValue, "tool_choice names no function in tools")
		}
		tools = kept
		dst = append(dst, `,"tools":[`...)
		for i, t := range tools {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, t.raw...)
		}
		return append(dst, ']'), nil
	}
	if len(tools) == 0 {
		return dst, nil
	}
	dst = append(dst, `,"tools":`...)
	return append(dst, r.tools...), nil
}

// choice reads tool_choice: a mode ("none", "auto", "required") or the
// names of the allowed functions.
func (r *request) choice() (mode string, names []string, err error) {
	tc := r.toolChoice
	switch jsonscan.KindOf(tc) {
	case jsonscan.KindInvalid: // absent
		return "auto", nil, nil
	case jsonscan.KindString:
		switch string(tc) {
		case `"none"`, `"auto"`, `"required"`:
			return string(tc[1 : len(tc)-1]), nil, nil
		}
		return "", nil, invalid("tool_choice", codeInvalidValue, `tool_choice must be "none", "auto", "required" or an object`)
	case jsonscan.KindObject:
	default:
		return "", nil, invalid("tool_choice", codeInvalidType, "tool_choice must be a string or an object")
	}
	var typ, fn, allowedTools []byte
	_ = jsonscan.Members(tc, func(key, val []byte) error {
		switch {
		case jsonscan.KeyIs(key, "type"):
			typ = val
		case jsonscan.KeyIs(key, "function"):
			fn = val
		case jsonscan.KeyIs(key, "allowed_tools"):
			allowedTools = val
		}
		return nil
	})
	switch string(typ) {
	case `"function"`:
		name, err := functionName(fn, "tool_choice.function")
		if err != nil {
			return "", nil, err
		}
		return "", []string{name}, nil
	case `"allowed_tools"`:
		// {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[{"type":"function","function":{"name":…}}]}}
		if jsonscan.KindOf(allowedTools) != jsonscan.KindObject {
			return "", nil, invalid("tool_choice.allowed_tools", codeInvalidType, "allowed_tools must be an object")
		}
		var list []byte
		_ = jsonscan.Members(allowedTools, func(key, val []byte) error {
			if jsonscan.KeyIs(key, "tools") {
				list = val
			}
			return nil
		})
		if jsonscan.KindOf(list) != jsonscan.KindArray {
			return "", nil, invalid("tool_choice.allowed_tools.tools", codeInvalidType, "allowed_tools.tools must be an array")
		}
		err = jsonscan.Elements(list, func(i int, t []byte) error {
			name, err := toolName(t, "tool_choice.allowed_tools.tools["+strconv.Itoa(i)+"]")
			names = append(names, name)
			return err
		})
		if err != nil {
			return "", nil, err
		}
		return "", names, nil
	}
	return "", nil, invalid("tool_choice.type", codeUnsupportedValue, "tool_choice.type must be function or allowed_tools")
}

// toolName checks a {"type":"function","function":{"name":…}} object and
// returns the name.
func toolName(t []byte, param string) (string, error) {
	if jsonscan.KindOf(t) != jsonscan.KindObject {
		return "", invalid(param, codeInvalidType, "a tool must be an object")
	}
	var typ, fn []byte
	_ = jsonscan.Members(t, func(key, val []byte) error {
		switch {
		case jsonscan.KeyIs(key, "type"):
			typ = val
		case jsonscan.KeyIs(key, "function"):
			fn = val
		}
		return nil
	})
	if string(typ) != `"function"` {
		return "", invalid(param+".type", codeUnsupportedValue, "only function tools are supported")
	}
	return functionName(fn, param+".function")
}

func functionName(fn []byte, param string) (string, error) {
	if jsonscan.KindOf(fn) != jsonscan.KindObject {
		return "", invalid(param, codeInvalidType, "function must be an object")
	}
	var name []byte
	_ = jsonscan.Members(fn, func(key, val []byte) error {
		if jsonscan.KeyIs(key, "name") {
			name = val
		}
		return nil
	})
	if jsonscan.KindOf(name) != jsonscan.KindString || jsonscan.IsEmptyString(name) {
		return "", invalid(param+".name", codeInvalidType, "function name must be a non-empty string")
	}
	return jsonscan.Unquote(name)
}

// appendThink maps reasoning controls to Ollama's think: Ollama's own
// "think" (a boolean or a level) wins, then reasoning.effort, then
// reasoning_effort, in the order Ollama's /v1 layer reads them.
func (r *request) appendThink(dst []byte, info *Info) ([]byte, error) {
	if r.think != nil {
		switch string(r.think) {
		case "true", "false", `"low"`, `"medium"`, `"high"`:
		default:
			return nil, invalid("think", codeInvalidValue, `think must be a boolean or "low", "medium" or "high"`)
		}
		dst = append(dst, `,"think":`...)
		return append(dst, r.think...), nil
	}
	effort, param := r.reasoningEffort, "reasoning_effort"
	if r.reasoning != nil {
		if jsonscan.KindOf(r.reasoning) != jsonscan.KindObject {
			return nil, invalid("reasoning", codeInvalidType, "reasoning must be an object")
		}
		_ = jsonscan.Members(r.reasoning, func(key, val []byte) error {
			switch {
			case jsonscan.KindOf(val) == jsonscan.KindNull:
			case jsonscan.KeyIs(key, "effort"):
				effort, param = val, "reasoning.effort"
			default:
				info.Dropped = append(info.Dropped, Drop{Field: "reasoning." + jsonscan.KeyName(key), Reason: "Ollama has only a thinking level"})
			}
			return nil
		})
	}
	if effort == nil {
		return dst, nil
	}
	var think string
	switch string(effort) {
	case `"none"`:
		think = "false"
	case `"minimal"`, `"low"`:
		// Ollama knows low, medium and high; minimal is nearest to low.
		think = `"low"`
	case `"medium"`:
		think = `"medium"`
	case `"high"`, `"xhigh"`:
		think = `"high"`
	default:
		return nil, invalid(param, codeInvalidValue, `reasoning effort must be "none", "minimal", "low", "medium", "high" or "xhigh"`)
	}
	dst = append(dst, `,"think":`...)
	return append(dst, think...), nil
}

// appendOptions writes Ollama's options: the sampling fields, num_predict
// from max_completion_tokens or max_tokens, stop as an array, num_ctx from
// the sizer, then whatever the client put in an "options" extra that is not
// already set.
func (r *request) appendOptions(dst []byte, opts RequestOptions) ([]byte, error) {
	dst = append(dst, `,"options":{`...)
	first := true
	var set []string
	put := func(name string, val []byte) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonscan.AppendKey(dst, name)
		dst = append(dst, val...)
		set = append(set, name)
	}
	if opts.NumCtx > 0 {
		put("num_ctx", strconv.AppendInt(nil, int64(opts.NumCtx), 10))
	}
	maxTokens, maxParam := r.maxCompletionTokens, "max_completion_tokens"
	if maxTokens == nil {
		maxTokens, maxParam = r.maxTokens, "max_tokens"
	}
	numbers := []struct {
		name, param string
		val         []byte
		integer     bool
	}{
		{"num_predict", maxParam, maxTokens, true},
		{"temperature", "temperature", r.temperature, false},
		{"top_p", "top_p", r.topP, false},
		{"top_k", "top_k", r.topK, true},
		{"min_p", "min_p", r.minP, false},
		{"presence_penalty", "presence_penalty", r.presencePenalty, false},
		{"frequency_penalty", "frequency_penalty", r.frequencyPenalty, false},
		{"repeat_penalty", "repeat_penalty", r.repeatPenalty, false},
		{"seed", "seed", r.seed, true},
	}
	for _, n := range numbers {
		val := n.val
		if val == nil && !opts.ModelSampling && (n.name == "temperature" || n.name == "top_p") {
			val = []byte("1") // OpenAI's default, as Ollama's /v1 sends
		}
		if val == nil {
			continue
		}
		if n.integer && !isInteger(val) {
			return nil, invalid(n.param, codeInvalidType, n.param+" must be an integer")
		}
		if jsonscan.KindOf(val) != jsonscan.KindNumber {
			return nil, invalid(n.param, codeInvalidType, n.param+" must be a number")
		}
		put(n.name, val)
	}
	if r.stop != nil {
		switch jsonscan.KindOf(r.stop) {
		case jsonscan.KindString:
			put("stop", append(append([]byte{'['}, r.stop...), ']'))
		case jsonscan.KindArray:
			var bad error
			empty := true
			_ = jsonscan.Elements(r.stop, func(i int, s []byte) error {
				empty = false
				if jsonscan.KindOf(s) != jsonscan.KindString {
					bad = invalid("stop", codeInvalidType, "stop must be a string or an array of strings")
				}
				return bad
			})
			if bad != nil {
				return nil, bad
			}
			if !empty {
				put("stop", r.stop)
			}
		default:
			return nil, invalid("stop", codeInvalidType, "stop must be a string or an array of strings")
		}
	}
	if r.options != nil {
		if jsonscan.KindOf(r.options) != jsonscan.KindObject {
			return nil, invalid("options", codeInvalidType, "options must be an object")
		}
		_ = jsonscan.Members(r.options, func(key, val []byte) error {
			name := jsonscan.KeyName(key)
			for _, s := range set {
				if s == name {
					return nil
				}
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, key...)
			dst = append(dst, ':')
			dst = append(dst, val...)
			return nil
		})
	}
	return append(dst, '}'), nil
}

// isInteger reports whether a number token has no fraction or exponent.
func isInteger(tok []byte) bool {
	if jsonscan.KindOf(tok) != jsonscan.KindNumber {
		return false
	}
	return !bytes.ContainsAny(tok, ".eE")
}

// keyBytes returns a key token's name without quotes, decoding escapes in
// the rare key that has them.
func keyBytes(key []byte) []byte {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	var s string
	if json.Unmarshal(key, &s) != nil {
		return inner
	}
	return []byte(s)
}

// messagePath is "messages[i]" plus a suffix.
func messagePath(i int, suffix string) string {
	var b strings.Builder
	b.WriteString("messages[")
	b.WriteString(strconv.Itoa(i))
	b.WriteByte(']')
	b.WriteString(suffix)
	return b.String()
}

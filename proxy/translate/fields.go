package translate

import (
	"bytes"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// The fields of a chat completions request that map to Ollama one by
// one: response_format, tools and tool_choice, reasoning effort, and the
// sampling options.

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
		case "true", "false", `"low"`, `"medium"`, `"high"`, `"max"`:
		default:
			return nil, invalid("think", codeInvalidValue, `think must be a boolean or "low", "medium", "high" or "max"`)
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

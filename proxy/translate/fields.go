package translate

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// The fields of a chat completions request that map to Ollama one by
// one: response_format, tools and tool_choice, reasoning effort, and the
// sampling options.

// appendFormat maps response_format to Ollama's format: "json" for
// json_object, the schema itself for json_schema. The type is read as
// Ollama's /v1 reads it (letter case and spaces aside); any other type,
// or none, is dropped, as Ollama ignores it.
func (r *request) appendFormat(dst []byte, info *Info) ([]byte, error) {
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
	if typ != nil && jsonscan.KindOf(typ) != jsonscan.KindString {
		return nil, invalid("response_format.type", codeInvalidType, "response_format.type must be a string")
	}
	return appendFormatType(dst, "response_format", "response_format.json_schema.schema", strings.ToLower(strings.TrimSpace(str(typ))), schema, info)
}

// appendFormatType writes the format for a format type and its schema
// (chat's response_format, Responses' text.format): at and schemaAt name
// the members.
func appendFormatType(dst []byte, at, schemaAt, typ string, schema []byte, info *Info) ([]byte, error) {
	switch typ {
	case "text":
		return dst, nil
	case "json_object":
		return append(dst, `,"format":"json"`...), nil
	case "json_schema":
		switch {
		case schema == nil || string(schema) == `"json"`:
			// A json_schema without a schema still asks for JSON.
			return append(dst, `,"format":"json"`...), nil
		case string(schema) == `""`:
			// Ollama reads an empty format as none.
			return dst, nil
		case jsonscan.KindOf(schema) != jsonscan.KindObject:
			// Ollama forwards it, and its runner refuses it.
			return nil, invalid(schemaAt, codeInvalidType, "schema must be an object")
		}
		dst = append(dst, `,"format":`...)
		return append(dst, schema...), nil
	}
	info.Dropped = append(info.Dropped, Drop{Field: at + ".type", Reason: "not text, json_object or json_schema; Ollama's own /v1 ignores it too"})
	return dst, nil
}

// appendTools forwards the function tools as they are (Ollama's tool shape
// is OpenAI's) and applies tool_choice as far as Ollama can: "none" sends
// no tools, a named function (or an allowed_tools list) sends only those
// tools; "auto" and "required" send all of them, since Ollama cannot force
// a call. Tools of other types (custom, web_search, …) are dropped: they
// run on OpenAI's servers, or take free text Ollama cannot constrain.
func (r *request) appendTools(dst []byte, info *Info) ([]byte, error) {
	if r.tools == nil {
		if mode, names := r.choice(info); mode == "required" || names != nil {
			info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "no tools to choose from"})
		}
		return dst, nil
	}
	if jsonscan.KindOf(r.tools) != jsonscan.KindArray {
		return nil, invalid("tools", codeInvalidType, "tools must be an array")
	}
	var tools []namedTool
	all := true
	err := jsonscan.Elements(r.tools, func(i int, t []byte) error {
		at := "tools[" + strconv.Itoa(i) + "]"
		name, function, err := toolName(t, at)
		if err != nil {
			return err
		}
		if !function {
			info.Dropped = append(info.Dropped, Drop{Field: at, Reason: "only function tools are carried to Ollama"})
			all = false
			return nil
		}
		tools = append(tools, namedTool{name, t})
		return nil
	})
	if err != nil {
		return nil, err
	}
	mode, names := r.choice(info)
	if all && mode == "auto" && names == nil {
		if len(tools) == 0 {
			return dst, nil
		}
		dst = append(dst, `,"tools":`...)
		return append(dst, r.tools...), nil
	}
	return appendChosenTools(dst, tools, mode, names, info), nil
}

// choice reads tool_choice: a mode ("none", "auto", "required") or the
// names of the allowed functions. Ollama's /v1 ignores tool_choice, so one
// ctxproxy cannot read is dropped (logged) and the tools are sent as with
// "auto".
func (r *request) choice(info *Info) (mode string, names []string) {
	tc := r.toolChoice
	ignore := func(why string) (string, []string) {
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: why + "; tools sent as with auto, as Ollama's own /v1 ignores tool_choice"})
		return "auto", nil
	}
	switch jsonscan.KindOf(tc) {
	case jsonscan.KindInvalid: // absent
		return "auto", nil
	case jsonscan.KindString:
		switch string(tc) {
		case `"none"`, `"auto"`, `"required"`:
			return string(tc[1 : len(tc)-1]), nil
		}
		return ignore(`not "none", "auto", "required" or an object`)
	case jsonscan.KindObject:
	default:
		return ignore("not a string or an object")
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
		if name := functionName(fn); name != "" {
			return "", []string{name}
		}
		return ignore("names no function")
	case `"allowed_tools"`:
		// {"type":"allowed_tools","allowed_tools":{"mode":…,"tools":[{"type":"function","function":{"name":…}}]}}
		var list []byte
		if jsonscan.KindOf(allowedTools) == jsonscan.KindObject {
			list = fields(allowedTools)["tools"]
		}
		if jsonscan.KindOf(list) == jsonscan.KindArray {
			_ = jsonscan.Elements(list, func(_ int, t []byte) error {
				if jsonscan.KindOf(t) == jsonscan.KindObject {
					if name := functionName(fields(t)["function"]); name != "" {
						names = append(names, name)
					}
				}
				return nil
			})
		}
		if names == nil {
			return ignore("allowed_tools lists no function")
		}
		return "", names
	}
	return ignore("a tool_choice type other than function or allowed_tools")
}

// toolName checks a {"type":"function","function":{"name":…}} object and
// returns the name ("" when it has none, as Ollama's /v1 forwards it);
// function is false for a tool of another type. A tool or a function that
// is not an object is an error: Ollama's /v1 cannot decode it either.
func toolName(t []byte, param string) (name string, function bool, err error) {
	if jsonscan.KindOf(t) != jsonscan.KindObject {
		return "", false, invalid(param, codeInvalidType, "a tool must be an object")
	}
	f := fields(t)
	typ, fn := f["type"], f["function"]
	if typ != nil && string(typ) != `"function"` || typ == nil && fn == nil {
		return "", false, nil
	}
	if fn != nil && jsonscan.KindOf(fn) != jsonscan.KindObject && jsonscan.KindOf(fn) != jsonscan.KindNull {
		return "", false, invalid(param+".function", codeInvalidType, "function must be an object")
	}
	if name := fields(fn)["name"]; name != nil && jsonscan.KindOf(name) != jsonscan.KindString && jsonscan.KindOf(name) != jsonscan.KindNull {
		return "", false, invalid(param+".function.name", codeInvalidType, "function name must be a string")
	}
	return functionName(fn), true, nil
}

// functionName is the name of a {"name":…} object, "" when it has none.
func functionName(fn []byte) string {
	if jsonscan.KindOf(fn) != jsonscan.KindObject {
		return ""
	}
	return str(fields(fn)["name"])
}

// appendThink maps reasoning controls to Ollama's think: Ollama's own
// "think" (a boolean or a level) wins, then reasoning.effort, then
// reasoning_effort, in the order Ollama's /v1 layer reads them.
func (r *request) appendThink(dst []byte, info *Info) ([]byte, error) {
	if r.think != nil {
		think := r.think
		switch string(think) {
		case "true", "false", `"low"`, `"medium"`, `"high"`:
		case `"max"`:
			if !atLeast(r.version, maxThinkVersion) {
				think = []byte(`"high"`)
			}
		default:
			// An extra Ollama's /v1 routes do not read (or, from 0.34 on
			// Responses, refuse): dropped rather than refused.
			info.Dropped = append(info.Dropped, Drop{Field: "think", Reason: `not a boolean or "low", "medium", "high" or "max"`})
			think = nil
		}
		if think != nil {
			dst = append(dst, `,"think":`...)
			return append(dst, think...), nil
		}
	}
	effort, param := r.reasoningEffort, "reasoning_effort"
	if r.reasoning != nil {
		if jsonscan.KindOf(r.reasoning) != jsonscan.KindObject {
			return nil, r.lenient(info, invalid("reasoning", codeInvalidType, "reasoning must be an object"))
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
	think, ok := effortThink(str(effort), r.version)
	if !ok || jsonscan.KindOf(effort) != jsonscan.KindString {
		return dst, r.lenient(info, invalid(param, codeInvalidValue, `reasoning effort must be "none", "minimal", "low", "medium", "high", "xhigh", "max" or "ultra"`))
	}
	if think == "" {
		return dst, nil // an empty effort, as Ollama reads it: none given
	}
	dst = append(dst, `,"think":`...)
	return append(dst, think...), nil
}

// maxThinkVersion is the first Ollama version whose think takes "max".
const maxThinkVersion = "0.22.0"

// effortThink maps an OpenAI reasoning effort to Ollama's think value
// (raw JSON; "" for an empty effort), as Ollama's newest /v1 maps it:
// none is false, minimal is low, xhigh and ultra are max. A server older
// than maxThinkVersion gets high for max, xhigh and ultra: it knows no
// higher level (and its own /v1 refuses them, where ctxproxy is lenient).
func effortThink(effort, version string) (string, bool) {
	switch effort {
	case "":
		return "", true
	case "none":
		return "false", true
	case "minimal", "low":
		return `"low"`, true
	case "medium":
		return `"medium"`, true
	case "high":
		return `"high"`, true
	case "max", "xhigh", "ultra":
		if atLeast(version, maxThinkVersion) {
			return `"max"`, true
		}
		return `"high"`, true
	}
	return "", false
}

// appendOptions writes Ollama's options: the sampling fields, num_predict
// from max_completion_tokens or max_tokens, stop as an array, num_ctx from
// the sizer, then whatever the client put in an "options" extra that is not
// already set. A value of the wrong type is refused where Ollama's own
// /v1 decodes the member, and dropped where it ignores it (request.strict).
func (r *request) appendOptions(dst []byte, opts RequestOptions, info *Info) ([]byte, error) {
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
	if maxTokens == nil || !isInteger(maxTokens) && r.maxTokens != nil {
		if maxTokens != nil {
			// Ollama's /v1 ignores max_completion_tokens: max_tokens stands.
			info.Dropped = append(info.Dropped, Drop{Field: maxParam, Reason: "not an integer; max_tokens used"})
		}
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
		var bad *Error
		switch {
		case n.integer && !isInteger(val):
			bad = invalid(n.param, codeInvalidType, n.param+" must be an integer")
		case jsonscan.KindOf(val) != jsonscan.KindNumber:
			bad = invalid(n.param, codeInvalidType, n.param+" must be a number")
		}
		if bad != nil {
			if err := r.lenient(info, bad); err != nil {
				return nil, err
			}
			continue
		}
		put(n.name, val)
	}
	if r.stop != nil {
		stop, err := r.stopList(info)
		if err != nil {
			return nil, err
		}
		if stop != nil {
			put("stop", stop)
		}
	}
	if r.options != nil {
		if jsonscan.KindOf(r.options) != jsonscan.KindObject {
			// An extra no Ollama /v1 route reads.
			info.Dropped = append(info.Dropped, Drop{Field: "options", Reason: "not an object"})
			return append(dst, '}'), nil
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

// stopList is the stop value as Ollama's array of strings, nil for none:
// a string becomes [string]; an array keeps its strings. Chat's stop is
// read by Ollama's /v1 as loosely (other values and elements ignored);
// where Ollama decodes it strictly (Messages' stop_sequences) a bad value
// is refused.
func (r *request) stopList(info *Info) ([]byte, error) {
	bad := func() error {
		return r.lenient(info, invalid("stop", codeInvalidType, "stop must be a string or an array of strings"))
	}
	switch jsonscan.KindOf(r.stop) {
	case jsonscan.KindString:
		return append(append([]byte{'['}, r.stop...), ']'), nil
	case jsonscan.KindArray:
	default:
		return nil, bad()
	}
	var kept [][]byte
	all := true
	_ = jsonscan.Elements(r.stop, func(_ int, s []byte) error {
		if jsonscan.KindOf(s) == jsonscan.KindString {
			kept = append(kept, s)
		} else {
			all = false
		}
		return nil
	})
	if !all {
		if err := bad(); err != nil {
			return nil, err
		}
	}
	switch {
	case len(kept) == 0:
		return nil, nil
	case all:
		return r.stop, nil
	}
	out := []byte{'['}
	for i, k := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, k...)
	}
	return append(out, ']'), nil
}

// isInteger reports whether a number token has no fraction or exponent.
func isInteger(tok []byte) bool {
	if jsonscan.KindOf(tok) != jsonscan.KindNumber {
		return false
	}
	return !bytes.ContainsAny(tok, ".eE")
}

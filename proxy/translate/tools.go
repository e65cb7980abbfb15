package translate

import (
	"fmt"
	"strconv"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// The tools of a request and its tool_choice, in Ollama's shape: the
// Responses API's, and the choice every dialect applies the same way.

// appendResponsesTools writes the function tools in Ollama's shape and
// applies tool_choice as the chat translation does. Hosted tools
// (web_search, file_search, mcp, …) run on OpenAI's servers: they are left
// out and listed in Dropped.
func appendResponsesTools(dst, tools, choice []byte, info *Info) ([]byte, error) {
	list, err := toolList(tools, info, toolDialect{
		carried: func(typ string) bool { return typ == "function" },
		dropped: "hosted tool %q runs on OpenAI's servers; only function tools are carried",
		what:    "function", schema: "parameters",
	})
	if err != nil {
		return nil, err
	}
	mode, names := responsesChoice(choice, info)
	return appendChosenTools(dst, list, mode, names, info), nil
}

// toolDialect is how a dialect's tools list names what it carries.
type toolDialect struct {
	carried func(typ string) bool // the tool types carried to Ollama
	dropped string                // why another type is dropped (%q: its type)
	what    string                // "function" or "tool", in errors
	schema  string                // the member that holds the parameters' schema
}

// toolList reads a dialect's tools array into Ollama's shape: the tools
// of the types d carries, the others left out and listed in Dropped. A
// tool without a name is carried with an empty one, as Ollama's own
// routes forward it.
func toolList(tools []byte, info *Info, d toolDialect) ([]namedTool, error) {
	if tools == nil {
		return nil, nil
	}
	if jsonscan.KindOf(tools) != jsonscan.KindArray {
		return nil, invalid("tools", codeInvalidType, "tools must be an array")
	}
	var list []namedTool
	err := jsonscan.Elements(tools, func(i int, t []byte) error {
		at := "tools[" + strconv.Itoa(i) + "]"
		if jsonscan.KindOf(t) != jsonscan.KindObject {
			return invalid(at, codeInvalidType, "a tool must be an object")
		}
		f := fields(t)
		if typ := str(f["type"]); !d.carried(typ) {
			info.Dropped = append(info.Dropped, Drop{Field: at, Reason: fmt.Sprintf(d.dropped, typ)})
			return nil
		}
		name := f["name"]
		switch jsonscan.KindOf(name) {
		case jsonscan.KindString:
		case jsonscan.KindInvalid:
			name = []byte(`""`)
		default:
			return invalid(at+".name", codeInvalidType, d.what+" name must be a string")
		}
		list = append(list, namedTool{str(name), appendToolFunction(nil, name, f["description"], f[d.schema])})
		return nil
	})
	return list, err
}

// namedTool is a tool in Ollama's shape with its function name.
type namedTool struct {
	name string
	raw  []byte
}

// appendChosenTools writes the tools tool_choice leaves: none for "none",
// the named ones for a choice of functions, all of them otherwise (Ollama
// cannot force a call, so "required" is logged). Ollama's own /v1 layers
// ignore tool_choice: a choice that names no tool sent, or "required"
// without tools, is dropped (logged) and the tools are sent as with auto.
func appendChosenTools(dst []byte, tools []namedTool, mode string, names []string, info *Info) []byte {
	switch {
	case mode == "none":
		if len(tools) > 0 {
			info.Dropped = append(info.Dropped, Drop{Field: "tools", Reason: `tool_choice is "none"`})
		}
		return dst
	case mode == "required" && names == nil:
		if len(tools) == 0 {
			info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "no tools to require"})
			return dst
		}
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "Ollama cannot force a tool call; tools sent as with auto"})
	case names != nil:
		kept := tools[:0:0]
		for _, t := range tools {
			for _, n := range names {
				if t.name == n {
					kept = append(kept, t)
					break
				}
			}
		}
		if len(kept) == 0 {
			info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "names no tool sent; tools sent as with auto, as Ollama's own /v1 ignores tool_choice"})
			break
		}
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: "Ollama cannot force a tool call; only the chosen tools sent"})
		tools = kept
	}
	if len(tools) == 0 {
		return dst
	}
	dst = append(dst, `,"tools":[`...)
	for i, t := range tools {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, t.raw...)
	}
	return append(dst, ']')
}

// responsesChoice reads tool_choice: "none", "auto", "required",
// {"type":"function","name"} or {"type":"allowed_tools","tools":[…]}.
// Ollama's /v1/responses ignores tool_choice, so one ctxproxy cannot read,
// or one that chooses a hosted tool (never sent to Ollama), is dropped
// (logged) and the tools are sent as with "auto".
func responsesChoice(tc []byte, info *Info) (string, []string) {
	ignore := func(why string) (string, []string) {
		info.Dropped = append(info.Dropped, Drop{Field: "tool_choice", Reason: why + "; tools sent as with auto, as Ollama's own /v1 ignores tool_choice"})
		return "auto", nil
	}
	switch jsonscan.KindOf(tc) {
	case jsonscan.KindInvalid:
		return "auto", nil
	case jsonscan.KindString:
		switch s := str(tc); s {
		case "none", "auto", "required":
			return s, nil
		}
		return ignore(`not "none", "auto", "required" or an object`)
	case jsonscan.KindObject:
	default:
		return ignore("not a string or an object")
	}
	f := fields(tc)
	switch typ := str(f["type"]); typ {
	case "function":
		if name := str(f["name"]); name != "" {
			return "", []string{name}
		}
		return ignore("names no function")
	case "allowed_tools":
		var names []string
		if jsonscan.KindOf(f["tools"]) == jsonscan.KindArray {
			_ = jsonscan.Elements(f["tools"], func(_ int, t []byte) error {
				if jsonscan.KindOf(t) == jsonscan.KindObject {
					if n := str(fields(t)["name"]); n != "" {
						names = append(names, n)
					}
				}
				return nil
			})
		}
		if names == nil {
			return ignore("allowed_tools lists no function")
		}
		if str(f["mode"]) == "required" {
			return "required", names
		}
		return "", names
	default:
		return ignore("chooses a hosted tool (" + strconv.Quote(typ) + "), which is not sent to Ollama")
	}
}

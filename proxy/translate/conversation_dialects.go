package translate

import (
	"strings"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/imagesize"
	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// DecodeResponses reads a Responses API request body as a Conversation.
// Any error wraps ErrNotConversation: forward the body unchanged.
func DecodeResponses(body []byte) (*Conversation, error) {
	f, err := top(body)
	if err != nil {
		return nil, err
	}
	c := &Conversation{body: body}
	if err := c.decodeCommon(f, "max_output_tokens"); err != nil {
		return nil, err
	}
	c.PreviousResponseID = str(f["previous_response_id"])
	if ins := f["instructions"]; hasText(ins) {
		c.systemMessage(ins, str(ins))
	}
	input := f["input"]
	switch jsonscan.KindOf(input) {
	case jsonscan.KindString:
		c.inputString = append(append([]byte(`{"role":"user","content":`), input...), '}')
		c.Messages = append(c.Messages, chat.Message{Role: "user", Content: str(input), Raw: c.inputString})
		c.FirstUser = str(input)
	case jsonscan.KindArray:
		var group [][]byte // reasoning items waiting for their item
		err = jsonscan.Elements(input, func(i int, item []byte) error {
			if jsonscan.KindOf(item) != jsonscan.KindObject {
				return notConversation("input[%d] is not an object", i)
			}
			var m chat.Message
			item = c.annotations(item, &m)
			itemFields := fields(item)
			if str(itemFields["type"]) == "reasoning" {
				group = append(group, item)
				return nil
			}
			switch str(itemFields["type"]) {
			case "compaction", "compaction_trigger":
				c.Compaction = true
			}
			responsesItem(&m, itemFields)
			m.Raw = item
			if len(group) > 0 {
				m.Raw = appendArray(group, item)
				group = nil
			}
			if c.FirstUser == "" && m.Role == "user" {
				c.FirstUser = m.Content
			}
			if c.FirstSystem == "" && (m.Role == "system" || m.Role == "developer") {
				c.FirstSystem = m.Content
			}
			c.Messages = append(c.Messages, m)
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(group) > 0 {
			c.Messages = append(c.Messages, chat.Message{Role: "assistant", Raw: appendArray(group, nil)})
		}
	case jsonscan.KindInvalid:
		// No input: a continuation of server-side state (previous_response_id,
		// conversation, prompt); nothing to manage.
	default:
		return nil, notConversation("input is neither a string nor an array")
	}
	if t := f["tools"]; jsonscan.KindOf(t) == jsonscan.KindArray {
		var info Info
		tools, err := appendResponsesTools(nil, t, nil, &info)
		if err == nil && len(tools) > 0 {
			c.Tools = tools[len(`,"tools":`):]
		}
	}
	return c, nil
}

// responsesItem fills m from one input item. Tool calls of any kind
// (function_call, custom_tool_call, …) carry call_id, and so do their
// outputs; pairing them by it keeps every kind of call with its output.
func responsesItem(m *chat.Message, f map[string][]byte) {
	typ := str(f["type"])
	switch {
	case typ == "message" || (typ == "" && f["role"] != nil):
		m.Role = strings.ToLower(str(f["role"]))
		toks, images := contentTexts(f["content"], false)
		m.Content, m.Images = texts(toks), images
	case strings.HasSuffix(typ, "_call_output"):
		m.Role, m.ToolCallID = "tool", str(f["call_id"])
		toks, images := contentTexts(f["output"], false)
		m.Content, m.Images = texts(toks), images
	case strings.HasSuffix(typ, "_call") && f["call_id"] != nil:
		m.Role = "assistant"
		args := str(f["arguments"])
		if args == "" {
			args = str(f["input"])
		}
		m.ToolCalls = []chat.ToolCall{{ID: str(f["call_id"]), Name: str(f["name"]), Arguments: args}}
	default:
		// item_reference, hosted tool calls without call_id, …: opaque
		// items of the assistant's side.
		m.Role = "assistant"
	}
}

// contentTexts returns the text tokens and the images of a content
// value: a string, or parts whose text is in "text" (input_text,
// output_text, text, tool results' text blocks).
func contentTexts(v []byte, anthropic bool) ([][]byte, []chat.Image) {
	switch jsonscan.KindOf(v) {
	case jsonscan.KindString:
		return [][]byte{v}, nil
	case jsonscan.KindArray:
	default:
		return nil, nil
	}
	var toks [][]byte
	var images []chat.Image
	_ = jsonscan.Elements(v, func(_ int, p []byte) error {
		if jsonscan.KindOf(p) != jsonscan.KindObject {
			return nil
		}
		f := fields(p)
		switch typ := str(f["type"]); {
		case typ == "input_image" || typ == "image":
			images = append(images, imagesize.Of(p))
		case typ == "tool_result" && anthropic:
			t, imgs := contentTexts(f["content"], true)
			toks, images = append(toks, t...), append(images, imgs...)
		case jsonscan.KindOf(f["text"]) == jsonscan.KindString && typ != "thinking":
			toks = append(toks, f["text"])
		}
		return nil
	})
	return toks, images
}

// appendArray writes the items (and last, when not nil) as a JSON array.
func appendArray(items [][]byte, last []byte) []byte {
	if last != nil {
		items = append(items, last)
	}
	out := []byte{'['}
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, ']')
}

// encodeResponses writes msgs back as the input.
func (c *Conversation) encodeResponses(out []byte, msgs []chat.Message) ([]byte, error) {
	if len(msgs) == 1 && c.inputString != nil && !msgs[0].Edited && string(msgs[0].Raw) == string(c.inputString) {
		return out, nil // a string input comes back as it was
	}
	arr := []byte{'['}
	n := 0
	add := func(item []byte) {
		if n > 0 {
			arr = append(arr, ',')
		}
		n++
		arr = append(arr, item...)
	}
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Raw == nil:
			add(appendPlain(nil, m.Role, m.Content))
		case jsonscan.KindOf(m.Raw) == jsonscan.KindArray:
			var items [][]byte
			_ = jsonscan.Elements(m.Raw, func(_ int, it []byte) error {
				items = append(items, it)
				return nil
			})
			if m.Edited && len(items) > 0 {
				items[len(items)-1] = editItem(items[len(items)-1], m.Content)
			}
			for _, it := range items {
				add(it)
			}
		case m.Edited:
			add(editItem(m.Raw, m.Content))
		default:
			add(m.Raw)
		}
	}
	return setMember(out, "input", append(arr, ']'))
}

// editItem writes text into a message item's content or an output item's
// output.
func editItem(item []byte, text string) []byte {
	key := "content"
	if strings.HasSuffix(str(fields(item)["type"]), "_call_output") {
		key = "output"
	}
	out, err := setMember(item, key, editText(fields(item)[key], text, textPart(false)))
	if err != nil {
		return item
	}
	return out
}

// DecodeMessages reads an Anthropic Messages request body as a
// Conversation. Any error wraps ErrNotConversation: forward the body
// unchanged.
func DecodeMessages(body []byte) (*Conversation, error) {
	f, err := top(body)
	if err != nil {
		return nil, err
	}
	c := &Conversation{body: body, anthropic: true}
	if err := c.decodeCommon(f, "max_tokens"); err != nil {
		return nil, err
	}
	if sys := f["system"]; sys != nil {
		toks, _ := contentTexts(sys, true)
		if text := texts(toks); text != "" {
			c.systemMessage(sys, text)
		}
	}
	msgs := f["messages"]
	if jsonscan.KindOf(msgs) != jsonscan.KindArray {
		return nil, notConversation("messages is not an array")
	}
	err = jsonscan.Elements(msgs, func(i int, raw []byte) error {
		if jsonscan.KindOf(raw) != jsonscan.KindObject {
			return notConversation("messages[%d] is not an object", i)
		}
		var m chat.Message
		m.Raw = c.annotations(raw, &m)
		mf := fields(m.Raw)
		m.Role = strings.ToLower(str(mf["role"])) // as Ollama reads it
		if m.Role == "" {
			return notConversation("messages[%d] has no role", i)
		}
		toks, images := contentTexts(mf["content"], true)
		m.Content, m.Images = texts(toks), images
		if jsonscan.KindOf(mf["content"]) == jsonscan.KindArray {
			_ = jsonscan.Elements(mf["content"], func(_ int, b []byte) error {
				bf := fields(b)
				switch str(bf["type"]) {
				case "tool_use":
					m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: str(bf["id"]), Name: str(bf["name"]), Arguments: string(bf["input"])})
				case "tool_result":
					if m.ToolCallID == "" {
						m.Role, m.ToolCallID = "tool", str(bf["tool_use_id"])
					}
				}
				return nil
			})
		}
		if c.FirstUser == "" && m.Role == "user" {
			c.FirstUser = m.Content
		}
		c.Messages = append(c.Messages, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if t := f["tools"]; jsonscan.KindOf(t) == jsonscan.KindArray {
		var info Info
		tools, err := appendAnthropicTools(nil, t, nil, &info)
		if err == nil && len(tools) > 0 {
			c.Tools = tools[len(`,"tools":`):]
		}
	}
	return c, nil
}

// encodeMessages writes msgs back as the messages array. Summaries
// ctxproxy made as system messages go to the system field when they lead
// (Anthropic has no system role in messages), else into a user message.
func (c *Conversation) encodeMessages(out []byte, msgs []chat.Message) ([]byte, error) {
	var err error
	for len(msgs) > 0 && msgs[0].Raw == nil && msgs[0].Role == "system" && c.system == nil {
		if out, err = setMember(out, "system", jsonscan.AppendString(nil, msgs[0].Content)); err != nil {
			return nil, err
		}
		msgs = msgs[1:]
	}
	arr := []byte{'['}
	for i := range msgs {
		if i > 0 {
			arr = append(arr, ',')
		}
		m := &msgs[i]
		switch {
		case m.Raw == nil:
			role := m.Role
			if role != "assistant" {
				role = "user"
			}
			arr = appendPlain(arr, role, m.Content)
		case m.Edited:
			arr = append(arr, editAnthropic(m)...)
		default:
			arr = append(arr, m.Raw...)
		}
	}
	return setMember(out, "messages", append(arr, ']'))
}

// editAnthropic writes an edited message's text back: into its content,
// or, for a message of tool results, into the first tool_result (the
// others keep their blocks with empty content, since every tool_use needs
// its result).
func editAnthropic(m *chat.Message) []byte {
	content := fields(m.Raw)["content"]
	var val []byte
	if m.Role == "tool" && jsonscan.KindOf(content) == jsonscan.KindArray {
		val = []byte{'['}
		first := true
		n := 0
		_ = jsonscan.Elements(content, func(_ int, b []byte) error {
			switch str(fields(b)["type"]) {
			case "tool_result":
				text := ""
				if first {
					text, first = m.Content, false
				}
				if e, err := setMember(b, "content", jsonscan.AppendString(nil, text)); err == nil {
					b = e
				}
			case "text":
				return nil // its text is in the first result now
			}
			if n > 0 {
				val = append(val, ',')
			}
			n++
			val = append(val, b...)
			return nil
		})
		val = append(val, ']')
	} else {
		val = editText(content, m.Content, textPart(true))
	}
	out, err := setMember(m.Raw, "content", val)
	if err != nil {
		return m.Raw
	}
	return out
}

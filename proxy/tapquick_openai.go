package proxy

import "github.com/ctxproxy/ctxproxy/internal/jsonscan"

// quickChoice is what quickEvent read of an OpenAI chunk: its one choice
// (index 0) and its usage.
type quickChoice struct {
	choice bool
	// String tokens of the delta (or message), nil when absent or null,
	// and finish_reason when a string; named apart from quick's own
	// (Ollama) fields.
	delta, deltaRC, deltaReason, finish []byte
	usage                               bool
	usagePrompt, usageOut               int
}

// applyOpenAI does what decodeEvent does with the first choice and the
// usage.
func (t *tap) applyOpenAI(o *quickChoice, whole bool) {
	if o.choice {
		if o.delta != nil {
			t.appendToken(&t.content, o.delta)
		}
		if o.deltaRC != nil {
			t.appendToken(&t.think, o.deltaRC)
		} else if o.deltaReason != nil {
			t.appendToken(&t.think, o.deltaReason)
		}
		if o.finish != nil {
			if fr, err := jsonscan.Unquote(o.finish); err == nil && fr != "" {
				t.r.finishReason = fr
				if whole {
					t.r.complete = true
				}
			}
		}
	}
	if o.usage {
		t.r.promptTokens, t.r.outputTokens = o.usagePrompt, o.usageOut
		if whole {
			t.r.complete = true
		}
	}
}

// The keys of a choice, its delta (or message) and usage that quickEvent
// reads.
var (
	choiceKeys = []string{"index", "delta", "message", "finish_reason"}
	deltaKeys  = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
	usageKeys  = []string{"prompt_tokens", "completion_tokens"}
)

// readChoices reads OpenAI's choices: one choice, of index 0, is read;
// several are left to decodeEvent.
func (q *quick) readChoices(arr []byte) {
	n := 0
	_ = jsonscan.Elements(arr, func(_ int, el []byte) error {
		if n++; n > 1 || jsonscan.KindOf(el) != jsonscan.KindObject {
			q.declined = true
			return errDeclined
		}
		var delta, message []byte
		q.members(el, choiceKeys, func(i int, val []byte) {
			null := jsonscan.KindOf(val) == jsonscan.KindNull
			switch i {
			case 0:
				idx, bad := intToken(val)
				q.declined = bad || idx != 0
			case 1, 2:
				switch {
				case null:
				case jsonscan.KindOf(val) != jsonscan.KindObject:
					q.declined = true
				case i == 1:
					delta = val
				default:
					message = val
				}
			case 3:
				// A finish_reason that is not a string is ignored, as
				// decodeEvent ignores what it cannot read as one.
				if jsonscan.KindOf(val) == jsonscan.KindString {
					tok, bad := stringToken(val)
					q.finish, q.declined = tok, bad
				}
			}
		})
		if q.declined {
			return errDeclined
		}
		switch {
		case delta != nil && message != nil:
			q.declined = true // decodeEvent reads both; the delta wins
		case delta != nil:
			q.readDelta(delta)
		case message != nil:
			q.readDelta(message)
		}
		q.choice = true
		return nil
	})
}

// readDelta reads a choice's delta (or message); tool calls are left to
// decodeEvent.
func (q *quick) readDelta(obj []byte) {
	q.members(obj, deltaKeys, func(i int, val []byte) {
		switch i {
		case 0:
			q.delta, q.declined = stringToken(val)
		case 1:
			q.deltaRC, q.declined = stringToken(val)
		case 2:
			q.deltaReason, q.declined = stringToken(val)
		case 3:
			q.declined = string(val) != "null" && string(val) != "[]"
		}
	})
}

// readUsage reads usage's token counts.
func (q *quick) readUsage(obj []byte) {
	q.usage = true
	q.members(obj, usageKeys, func(i int, val []byte) {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return
		}
		n, bad := intToken(val)
		if i == 0 {
			q.usagePrompt = n
		} else {
			q.usageOut = n
		}
		q.declined = bad
	})
}

package proxy

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// Every chunk of a streamed answer passes through the tap, and decoding
// each into the event struct with encoding/json's reflection cost more
// than the rest of the chunk's trip through ctxproxy. quickEvent reads the
// common shapes with jsonscan, which hands out sub-slices of the chunk and
// allocates nothing for them: an Ollama chunk or answer (the message's
// content and thinking, done, done_reason and the counts), and an OpenAI
// one (the first choice's content, reasoning and finish_reason, usage).
// Anything else (tool calls, several choices, a repeated key, a key that
// matches a known one only without regard to case, a value of an
// unexpected type) is left, untouched, to event's full decoding, so the
// two always agree.

// quickKeys are the event's top-level keys quickEvent knows.
var quickKeys = [...]string{"message", "done", "done_reason", "prompt_eval_count", "eval_count", "error", "choices", "usage"}

// quick is what quickEvent read from one event.
type quick struct {
	message          bool
	content, think   []byte // raw string tokens, quotes included; nil when absent or null
	done             bool
	doneReason       []byte
	promptEval       int
	hasPromptEval    bool
	evalCount        int
	failed, declined bool
	// ollama reports one of Ollama's keys; OpenAI's are read by
	// readChoices and readUsage (tapquick_openai.go).
	ollama bool
	quickChoice
}

// quickEvent applies an event it can read in full and reports true; it
// reports false, having changed nothing, when event must decode it.
func (t *tap) quickEvent(data []byte, whole bool) bool {
	v, err := jsonscan.Valid(data)
	if err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
		// Not an object: encoding/json fails on it or finds no field.
		return err != nil || jsonscan.KindOf(v) == jsonscan.KindNull
	}
	var q quick
	q.members(v, quickKeys[:], func(i int, val []byte) { q.read(quickKeys[i], val) })
	if q.declined || q.ollama && (q.choice || q.usage) {
		return false // declined, or both shapes in one event
	}
	if q.failed {
		return true // an error event: not a reply
	}
	if q.message {
		t.appendToken(&t.content, q.content)
		t.appendToken(&t.think, q.think)
	}
	if q.hasPromptEval {
		t.r.promptTokens = q.promptEval
		t.r.outputTokens = q.evalCount
	}
	if q.done || (whole && q.message) {
		t.r.complete = true
		t.r.finishReason = ""
		if q.doneReason != nil {
			t.r.finishReason, _ = jsonscan.Unquote(q.doneReason)
		}
	}
	t.applyOpenAI(&q.quickChoice, whole)
	return true
}

// errDeclined stops a member walk that met what quickEvent leaves to
// event.
var errDeclined = errors.New("declined")

// members walks obj's members for the keys in names (matched exactly),
// calling fn with each one's index; a repeated key, or one encoding/json
// would match to a name without regard to case, declines the event.
func (q *quick) members(obj []byte, names []string, fn func(i int, val []byte)) {
	var seen uint
	_ = jsonscan.Members(obj, func(key, val []byte) error {
		name := key[1 : len(key)-1]
		found := -1
		for i, n := range names {
			if string(name) == n {
				found = i
				break
			}
		}
		switch {
		case found >= 0 && seen&(1<<found) != 0:
			q.declined = true
		case found >= 0:
			seen |= 1 << found
			fn(found, val)
		case unusualKey(name):
			q.declined = true
		default:
			for _, n := range names {
				if foldsTo(name, n) {
					q.declined = true
				}
			}
		}
		if q.declined {
			return errDeclined
		}
		return nil
	})
}

// unusualKey reports a key with escapes or non-ASCII bytes, which
// encoding/json may still match to a field (it folds Unicode: "ſ" is "s").
func unusualKey(name []byte) bool {
	for _, c := range name {
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// foldsTo reports whether the ASCII key name equals k regardless of case.
func foldsTo(name []byte, k string) bool {
	if len(name) != len(k) {
		return false
	}
	for i := range len(name) {
		a, b := name[i], k[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// read takes one top-level member.
func (q *quick) read(key string, val []byte) {
	null := jsonscan.KindOf(val) == jsonscan.KindNull
	switch key {
	case "message", "done", "done_reason", "prompt_eval_count", "eval_count":
		q.ollama = true
	}
	switch key {
	case "message":
		switch {
		case null:
		case jsonscan.KindOf(val) == jsonscan.KindObject:
			q.message = true
			q.readMessage(val)
		default:
			q.declined = true
		}
	case "done":
		switch string(val) {
		case "true":
			q.done = true
		case "false", "null":
		default:
			q.declined = true
		}
	case "done_reason":
		q.doneReason, q.declined = stringToken(val)
	case "prompt_eval_count":
		if !null {
			q.promptEval, q.declined = intToken(val)
			q.hasPromptEval = true
		}
	case "eval_count":
		if !null {
			q.evalCount, q.declined = intToken(val)
		}
	case "error":
		q.failed = !null
	case "choices":
		switch {
		case null:
		case jsonscan.KindOf(val) == jsonscan.KindArray:
			q.readChoices(val)
		default:
			q.declined = true
		}
	case "usage":
		switch {
		case null:
		case jsonscan.KindOf(val) == jsonscan.KindObject:
			q.readUsage(val)
		default:
			q.declined = true
		}
	}
}

// messageKeys are the message's keys readMessage knows.
var messageKeys = []string{"content", "thinking", "tool_calls"}

// readMessage takes the message's content and thinking; tool calls are
// left to event.
func (q *quick) readMessage(obj []byte) {
	q.members(obj, messageKeys, func(i int, val []byte) {
		switch i {
		case 0:
			q.content, q.declined = stringToken(val)
		case 1:
			q.think, q.declined = stringToken(val)
		case 2:
			q.declined = string(val) != "null" && string(val) != "[]"
		}
	})
}

// stringToken returns a string value's token, nil for null; declined for
// any other kind, and for text that is not valid UTF-8 (encoding/json
// replaces such bytes).
func stringToken(val []byte) (tok []byte, declined bool) {
	switch jsonscan.KindOf(val) {
	case jsonscan.KindString:
		return val, !utf8.Valid(val)
	case jsonscan.KindNull:
		return nil, false
	}
	return nil, true
}

// intToken returns an integer value; declined for anything encoding/json
// would not put in an int.
func intToken(val []byte) (int, bool) {
	n, err := strconv.Atoi(string(val))
	return n, err != nil
}

// appendToken appends a string token's text to sb, within the tap's limit.
func (t *tap) appendToken(sb *strings.Builder, tok []byte) {
	if len(tok) < 2 {
		return
	}
	inner := tok[1 : len(tok)-1]
	if len(inner) == 0 {
		return
	}
	if bytes.IndexByte(inner, '\\') >= 0 {
		t.appendContent(sb, string(jsonscan.AppendUnescaped(nil, tok)))
		return
	}
	if sb.Len()+len(inner) > t.limit {
		t.r.truncated = true
		return
	}
	sb.Write(inner)
}

package proxy

import (
	"errors"
	"unsafe"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// A chat body is nearly all messages. Validating the whole body
// (validMembers) and then walking its messages again to decode them
// (decodeValidChat) reads that text several times over: once to validate
// each string, again to find where it ends, again to look for escapes.
// decodeChatDepth validates the top-level members as validMembers does but leaves the
// messages array to the decoder here, which validates each message in the
// same walk that reads it (jsonscan.ValidMembersFunc, ValidMembersAt).
//
// Only a valid chat takes that path to the end. On any error the body is
// read again the old way, validMembers then decodeValidChat, and that
// result is the answer: what bad input gets (which error, ErrDepth or a
// syntax error or not a chat) stays exactly what the two passes give, and
// only bad input pays for the second read.

// errFused is the fast path's own failure; it never leaves decodeChatDepth.
var errFused = errors.New("not a plain chat")

// decodeChatDepth decodes body as a chat request of dialect d (Ollama or
// OpenAI), nested at most depth levels deep. Its error is validMembers'
// own when the body is not valid JSON within depth (jsonscan.ErrDepth
// among them), else one wrapping errNotChat from decodeValidChat.
func decodeChatDepth(d Dialect, body []byte, depth int) (*chatRequest, error) {
	if req, err := decodeFused(d, body, depth); err == nil {
		return req, nil
	}
	ms, err := validMembers(body, depth)
	if err != nil {
		return nil, err
	}
	return decodeValidChat(d, body, ms)
}

// decodeFused is decodeValidChat(validMembers(body)) in one read of the
// messages. It fails, with no reason given, wherever the two passes might
// fail or read the body differently.
func decodeFused(d Dialect, body []byte, depth int) (*chatRequest, error) {
	if i := jsonscan.SkipSpace(body, 0); i >= len(body) || body[i] != '{' {
		return nil, errFused
	}
	req := &chatRequest{dialect: d, body: body, stream: d == Ollama}
	ms := make([]member, 0, 8)
	dec := messagesDecoder{body: body}
	_, err := jsonscan.ValidMembersFunc(body, depth, func(key, val []byte) {
		ms = append(ms, memberOf(body, key, val))
	}, isMessagesKey, dec.decode)
	if err != nil {
		return nil, errFused
	}
	req.members = ms
	msgs, err := req.decodeMembers(ms)
	if err != nil || msgs == nil {
		return nil, errFused
	}
	// The last "messages" member wins, as findMember has it; every one
	// was validated as it was decoded.
	req.messages, req.annotated = dec.last, dec.annotated
	for i := range req.messages {
		req.noteFirst(&req.messages[i])
	}
	return req, nil
}

// isMessagesKey reports the key token of the member decodeFused decodes
// itself, the one keyName calls "messages".
func isMessagesKey(key []byte) bool { return jsonscan.KeyIs(key, "messages") }

// messagesDecoder decodes the value of each "messages" member of a body
// as ValidMembersFunc meets it, keeping the last.
type messagesDecoder struct {
	body []byte
	last []rewrite.Message
	// annotated reports that one of last carried _preserve/_importance.
	annotated bool
}

// decode validates the array of message objects at body[i], nested at
// most limit levels deep (the array is one), decodes its messages, and
// returns the index just past it. It checks the array's own syntax as
// jsonscan does: elements separated by single commas, no comma before the
// closing bracket.
func (dec *messagesDecoder) decode(i, limit int) (int, error) {
	d := dec.body
	if i >= len(d) || d[i] != '[' || limit < 2 {
		return 0, errFused // not an array, or a message would nest too deep
	}
	// The end of the array is not known yet: the list is sized from
	// the rest of the body.
	msgs := messageList(d[i:])
	anyAnnotated := false
	i = jsonscan.SkipSpace(d, i+1)
	if i < len(d) && d[i] == ']' {
		dec.last, dec.annotated = msgs, false
		return i + 1, nil
	}
	for {
		m, annotated, end, err := decodeValidMessageAt(d, i, limit-1)
		if err != nil {
			return 0, errFused
		}
		msgs = append(msgs, m)
		anyAnnotated = anyAnnotated || annotated
		i = jsonscan.SkipSpace(d, end)
		if i >= len(d) {
			return 0, errFused
		}
		switch d[i] {
		case ',':
			i = jsonscan.SkipSpace(d, i+1)
		case ']':
			dec.last, dec.annotated = msgs, anyAnnotated
			return i + 1, nil
		default:
			return 0, errFused
		}
	}
}

// decodeValidMessageAt is decodeMessageAt of a message not yet validated:
// the object at d[i] is validated, nested at most limit levels deep, in
// the walk that lists its members.
func decodeValidMessageAt(d []byte, i, limit int) (rewrite.Message, bool, int, error) {
	var buf [8]member // the members are not kept: no allocation for them
	ms := buf[:0]
	end, err := jsonscan.ValidMembersAt(d, i, limit, func(key, val []byte, plain bool) {
		m := memberOf(d, key, val)
		m.plain = plain
		ms = append(ms, m)
	})
	if err != nil {
		return rewrite.Message{}, false, 0, err
	}
	m, annotated, err := decodeMessageMembers(d, i, end, ms)
	return m, annotated, end, err
}

// decodeMember is decodeString of a member's value, v, that the walk
// which found it may have seen to be a plain string (member.plain).
func decodeMember(v []byte, plain bool) (string, error) {
	if plain && len(v) > 2 {
		return unsafe.String(&v[1], len(v)-2), nil
	}
	return decodeString(v)
}

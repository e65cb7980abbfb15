package snapshots

// A fast decoder for the parts of a log record that every stored turn
// decodes again (apply): the session id of the listing entry and the body
// of an append record. encoding/json scans a record twice and reflects on
// every field; the record ctxproxy's own encoder writes has a fixed shape,
// which is read here with internal/jsonscan in one validation and one walk.
//
// The rule is that the result is exactly what json.Unmarshal gives, or
// nothing: each decoder reports ok false for anything it is not sure about
// (a key it does not know, a key twice, a key in another case or with
// escapes, null or a value of another type, a number that does not parse
// as encoding/json parses it, a string of invalid UTF-8, input that is not
// valid JSON), and the caller then decodes with encoding/json, which also
// produces the error when there is one. FuzzDeltaDecode holds it to that.

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// errFallback stops a walk at what the fast decoder leaves to
// encoding/json.
var errFallback = errors.New("snapshots: not in the form ctxproxy writes")

// fastInfoIs reports whether the listing entry ib holds session id id, as
// json.Unmarshal into a struct with only the "session_id" field would
// find it; ok is false when it cannot tell without encoding/json.
func fastInfoIs(ib []byte, id string) (match, ok bool) {
	obj, err := jsonscan.Valid(ib)
	if err != nil || jsonscan.KindOf(obj) != jsonscan.KindObject {
		return false, false
	}
	found := false
	err = jsonscan.Members(obj, func(key, val []byte) error {
		if string(key) == `"session_id"` {
			if found || jsonscan.KindOf(val) != jsonscan.KindString {
				return errFallback
			}
			found = true
			var sure bool
			if match, sure = stringIs(val, id); !sure {
				return errFallback
			}
			return nil
		}
		// encoding/json matches keys without regard to case (and folds
		// some non-ASCII letters too): another spelling of session_id
		// would win if it came later.
		k := key[1 : len(key)-1]
		for _, c := range k {
			if c >= utf8.RuneSelf || c == '\\' {
				return errFallback
			}
		}
		if strings.EqualFold(string(k), "session_id") {
			return errFallback
		}
		return nil
	})
	return match, err == nil && found
}

// stringIs reports whether the string token tok decodes to s, without
// making a string of it; ok is false for a token that encoding/json would
// decode differently from its bytes (invalid UTF-8).
func stringIs(tok []byte, s string) (is, ok bool) {
	inner := tok[1 : len(tok)-1]
	if !utf8.Valid(inner) {
		return false, false
	}
	for _, c := range inner {
		if c == '\\' {
			u, err := jsonscan.Unquote(tok)
			return u == s, err == nil
		}
	}
	return string(inner) == s, true
}

// fastString decodes a string token as encoding/json does; ok is false
// for any other value and for a string holding invalid UTF-8 (which
// encoding/json replaces byte by byte). A string with escapes is decoded
// in scratch (nil: none yet), which is kept for the next.
func fastString(tok []byte, scratch *[]byte) (string, bool) {
	if jsonscan.KindOf(tok) != jsonscan.KindString {
		return "", false
	}
	inner := tok[1 : len(tok)-1]
	if !utf8.Valid(inner) {
		return "", false
	}
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	// Decoded text is never longer than its escaped form.
	if cap(*scratch) < len(inner) {
		*scratch = make([]byte, 0, len(inner))
	}
	*scratch = jsonscan.AppendUnescaped((*scratch)[:0], tok)
	return string(*scratch), true
}

// fastRole is fastString without a new string for the usual roles.
func fastRole(tok []byte, scratch *[]byte) (string, bool) {
	switch string(tok) {
	case `"user"`:
		return "user", true
	case `"assistant"`:
		return "assistant", true
	case `"system"`:
		return "system", true
	case `"tool"`:
		return "tool", true
	}
	return fastString(tok, scratch)
}

// fastInt decodes an integer token of at most 18 digits (no overflow of
// an int); ok is false for anything else, fractions and exponents
// included, which encoding/json refuses for an int.
func fastInt(tok []byte) (int, bool) {
	digits := tok
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if len(digits) < len(tok) {
		n = -n
	}
	return n, true
}

// fastFloat decodes a number token as encoding/json does for a float64;
// ok is false for any other value and for a number out of range.
func fastFloat(tok []byte) (float64, bool) {
	if jsonscan.KindOf(tok) != jsonscan.KindNumber {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	return f, err == nil
}

// fastTime decodes a string token with time.Time's own UnmarshalJSON,
// which is what encoding/json calls with the same token.
func fastTime(tok []byte) (time.Time, bool) {
	var t time.Time
	if jsonscan.KindOf(tok) != jsonscan.KindString || t.UnmarshalJSON(tok) != nil {
		return time.Time{}, false
	}
	return t, true
}

// once records that a key was seen; it reports false for a key seen
// before (encoding/json would decode the second into what the first left,
// merging objects).
func once(seen *uint32, bit uint32) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// fastDelta decodes an append record's body into d, which must be zero,
// and returns its stats (for d.Stats when hasStats); ok is false when the
// caller must decode with encoding/json instead. Metadata and Summaries
// alias body; message Raw bytes do not (they are copied into one new
// array for the record).
func fastDelta(body []byte, d *delta) (st Stats, hasStats, ok bool) {
	obj, err := jsonscan.Valid(body)
	if err != nil || jsonscan.KindOf(obj) != jsonscan.KindObject {
		return st, false, false
	}
	var seen uint32
	err = jsonscan.Members(obj, func(key, v []byte) error {
		ok := false
		switch string(key) {
		case `"at"`:
			d.At, ok = fastInt(v)
			ok = ok && once(&seen, 1)
		case `"messages"`:
			ok = once(&seen, 2) && jsonscan.KindOf(v) == jsonscan.KindArray
			if ok {
				d.Messages, ok = fastMessages(v)
			}
		case `"model"`:
			var s string
			s, ok = fastString(v, new([]byte))
			d.Model = &s
			ok = ok && once(&seen, 4)
		case `"created"`:
			var t time.Time
			t, ok = fastTime(v)
			d.Created = &t
			ok = ok && once(&seen, 8)
		case `"updated"`:
			d.Updated, ok = fastTime(v)
			ok = ok && once(&seen, 16)
		case `"metadata"`:
			d.Metadata, ok = v, once(&seen, 32)
		case `"stats"`:
			ok = once(&seen, 64) && fastStats(v, &st)
			hasStats = true
		case `"summaries"`:
			d.Summaries, ok = v, once(&seen, 128)
		}
		if !ok {
			return errFallback
		}
		return nil
	})
	return st, hasStats, err == nil
}

// fastStats decodes a stats object into st.
func fastStats(obj []byte, st *Stats) bool {
	if jsonscan.KindOf(obj) != jsonscan.KindObject {
		return false
	}
	var seen uint32
	err := jsonscan.Members(obj, func(key, v []byte) error {
		var bit uint32
		var n *int
		ok := true
		switch string(key) {
		case `"tokens"`:
			bit, n = 1<<0, &st.Tokens
		case `"limit"`:
			bit, n = 1<<1, &st.Limit
		case `"usage"`:
			bit = 1 << 2
			st.Usage, ok = fastFloat(v)
		case `"sent"`:
			bit, n = 1<<3, &st.Sent
		case `"num_ctx"`:
			bit, n = 1<<4, &st.NumCtx
		case `"dropped"`:
			bit, n = 1<<5, &st.Dropped
		case `"summarized"`:
			bit, n = 1<<6, &st.Summarized
		case `"prompt_tokens"`:
			bit, n = 1<<7, &st.PromptTokens
		case `"completion_tokens"`:
			bit, n = 1<<8, &st.CompletionTokens
		case `"requests"`:
			bit, n = 1<<9, &st.Requests
		case `"truncations"`:
			bit, n = 1<<10, &st.Truncations
		case `"last_truncation"`:
			bit = 1 << 11
			st.LastTruncation, ok = fastTime(v)
		case `"overflow_retries"`:
			bit, n = 1<<12, &st.OverflowRetries
		case `"budget"`:
			bit = 1 << 13
			st.Budget = new(Allocation)
			ok = fastAllocation(v, st.Budget)
		default:
			return errFallback
		}
		if n != nil {
			*n, ok = fastInt(v)
		}
		if !ok || !once(&seen, bit) {
			return errFallback
		}
		return nil
	})
	return err == nil
}

// fastAllocation decodes a budget object into a.
func fastAllocation(obj []byte, a *Allocation) bool {
	if jsonscan.KindOf(obj) != jsonscan.KindObject {
		return false
	}
	var seen uint32
	err := jsonscan.Members(obj, func(key, v []byte) error {
		var bit uint32
		var n *int
		switch string(key) {
		case `"total"`:
			bit, n = 1, &a.Total
		case `"system"`:
			bit, n = 2, &a.System
		case `"tools"`:
			bit, n = 4, &a.Tools
		case `"reserve"`:
			bit, n = 8, &a.Reserve
		case `"conversation"`:
			bit, n = 16, &a.Conversation
		default:
			return errFallback
		}
		var ok bool
		if *n, ok = fastInt(v); !ok || !once(&seen, bit) {
			return errFallback
		}
		return nil
	})
	return err == nil
}

// fastMessages decodes a messages array. Each message's Raw is a copy, as
// encoding/json makes, but all of the record's share one new array (with
// no spare capacity to append into), so that they hold neither the record
// nor a log read whole.
func fastMessages(arr []byte) ([]Message, bool) {
	n := 0
	jsonscan.Elements(arr, func(int, []byte) error { n++; return nil })
	msgs := make([]Message, n)
	rawLen := 0
	var scratch []byte
	err := jsonscan.Elements(arr, func(i int, v []byte) error {
		if jsonscan.KindOf(v) != jsonscan.KindObject || !fastMessage(v, &msgs[i], &scratch) {
			return errFallback
		}
		rawLen += len(msgs[i].Raw)
		return nil
	})
	if err != nil {
		return nil, false
	}
	if rawLen > 0 {
		buf := make([]byte, 0, rawLen)
		for i := range msgs {
			if r := msgs[i].Raw; r != nil {
				start := len(buf)
				buf = append(buf, r...)
				msgs[i].Raw = buf[start:len(buf):len(buf)]
			}
		}
	}
	return msgs, true
}

// fastMessage decodes a message object into m; m.Raw is left aliasing obj.
func fastMessage(obj []byte, m *Message, scratch *[]byte) bool {
	var seen uint32
	err := jsonscan.Members(obj, func(key, v []byte) error {
		var bit uint32
		ok := false
		switch string(key) {
		case `"role"`:
			bit = 1
			m.Role, ok = fastRole(v, scratch)
		case `"content"`:
			bit = 2
			m.Content, ok = fastString(v, scratch)
		case `"timestamp"`:
			bit = 4
			m.Timestamp, ok = fastTime(v)
		case `"importance"`:
			bit = 8
			var f float64
			if f, ok = fastFloat(v); ok {
				m.Importance = &f
			}
		case `"metadata"`:
			// Rare: whatever a client attached, left to encoding/json.
			bit = 16
			ok = jsonscan.KindOf(v) == jsonscan.KindObject && json.Unmarshal(v, &m.Metadata) == nil
		case `"preserve"`:
			bit = 32
			ok = string(v) == "true" || string(v) == "false"
			m.Preserve = string(v) == "true"
		case `"raw"`:
			// A json.RawMessage takes any value, null included.
			bit = 64
			m.Raw, ok = v, true
		}
		if !ok || !once(&seen, bit) {
			return errFallback
		}
		return nil
	})
	return err == nil
}

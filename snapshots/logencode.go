package snapshots

// A fast encoder for what every stored turn encodes: its messages, the
// append record's body and the listing entry. It writes the bytes
// encoding/json writes for them (marshal for messages and the body,
// json.Marshal, with HTML escaping, for the listing entry), field by
// field, without reflection; for anything it does not write the same way
// (message or session metadata, summaries, a time outside the years 0 to
// 9999 or, in a listing entry, not in UTC) it reports ok false and the
// caller uses encoding/json. TestFastEncode and FuzzDeltaDecode hold it
// to encoding/json.

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSONString appends s as encoding/json writes a string: invalid
// UTF-8 as U+FFFD, U+2028 and U+2029 escaped, and <, > and & escaped when
// html is set (json.Marshal) but not otherwise (marshal).
func appendJSONString(dst []byte, s string, html bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJSONFloat appends a finite f as encoding/json writes a float64:
// like %g, but with ES6's exponent cutoffs and no zero-padded exponent.
func appendJSONFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendJSONTime appends `,"name":"t"` as encoding/json writes a time.Time
// in UTC (RFC 3339 with nanoseconds, as Time.MarshalJSON); ok is false for
// a time in another zone or outside the years 0 to 9999.
func appendJSONTime(dst []byte, name string, t time.Time) ([]byte, bool) {
	if t.Location() != time.UTC {
		return dst, false
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	dst = appendName(dst, name)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

// appendName appends `,"name":`.
func appendName(dst []byte, name string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

// appendInt appends `,"name":n`, or nothing for 0 when omitEmpty.
func appendInt(dst []byte, name string, n int, omitEmpty bool) []byte {
	if n == 0 && omitEmpty {
		return dst
	}
	return strconv.AppendInt(appendName(dst, name), int64(n), 10)
}

// appendMessageHead appends m as marshal writes it, less the closing
// brace; m's Timestamp must be in UTC and its Importance finite (as
// appendMessages makes and checks them), and m.Raw is not written.
func appendMessageHead(dst []byte, m *Message) ([]byte, bool) {
	if len(m.Metadata) > 0 {
		return dst, false
	}
	dst = append(dst, `{"role":`...)
	dst = appendJSONString(dst, m.Role, false)
	dst = append(dst, `,"content":`...)
	dst = appendJSONString(dst, m.Content, false)
	if !m.Timestamp.IsZero() {
		var ok bool
		if dst, ok = appendJSONTime(dst, "timestamp", m.Timestamp); !ok {
			return dst, false
		}
	}
	if m.Importance != nil {
		dst = appendJSONFloat(appendName(dst, "importance"), *m.Importance)
	}
	if m.Preserve {
		dst = append(dst, `,"preserve":true`...)
	}
	return dst, true
}

// appendInfo appends the listing entry info as json.Marshal writes it.
func appendInfo(dst []byte, info *SessionInfo) ([]byte, bool) {
	if math.IsNaN(info.Usage) || math.IsInf(info.Usage, 0) {
		return dst, false
	}
	dst = append(dst, `{"session_id":`...)
	dst = appendJSONString(dst, info.ID, true)
	if info.Model != "" {
		dst = appendJSONString(appendName(dst, "model"), info.Model, true)
	}
	var ok, ok2 bool
	dst, ok = appendJSONTime(dst, "created", info.Created)
	dst, ok2 = appendJSONTime(dst, "updated", info.Updated)
	dst = appendInt(dst, "messages", info.Messages, false)
	dst = appendInt(dst, "tokens", info.Tokens, false)
	dst = appendInt(dst, "limit", info.Limit, true)
	dst = appendJSONFloat(appendName(dst, "usage"), info.Usage)
	dst = appendInt(dst, "sent", info.Sent, true)
	dst = appendInt(dst, "requests", info.Requests, false)
	dst = appendInt(dst, "snapshots", info.Snapshots, false)
	if info.Bytes != 0 {
		dst = strconv.AppendInt(appendName(dst, "bytes"), info.Bytes, 10)
	}
	return append(dst, '}'), ok && ok2
}

// appendDelta appends an append record's body, without its messages, as
// marshal writes it; d's times must be in UTC and its usage finite (as
// normalHead makes them). A delta that changes metadata or summaries is
// left to marshal.
func appendDelta(dst []byte, d *delta) ([]byte, bool) {
	if d.Messages != nil || d.Metadata != nil || d.Summaries != nil {
		return dst, false
	}
	dst = strconv.AppendInt(append(dst, `{"at":`...), int64(d.At), 10)
	if d.Model != nil {
		dst = appendJSONString(appendName(dst, "model"), *d.Model, false)
	}
	ok := true
	if d.Created != nil {
		dst, ok = appendJSONTime(dst, "created", *d.Created)
	}
	var ok2 bool
	dst, ok2 = appendJSONTime(dst, "updated", d.Updated)
	ok = ok && ok2
	if st := d.Stats; st != nil {
		if math.IsNaN(st.Usage) || math.IsInf(st.Usage, 0) {
			return dst, false
		}
		dst = strconv.AppendInt(append(dst, `,"stats":{"tokens":`...), int64(st.Tokens), 10)
		dst = appendInt(dst, "limit", st.Limit, true)
		dst = appendJSONFloat(appendName(dst, "usage"), st.Usage)
		dst = appendInt(dst, "sent", st.Sent, true)
		dst = appendInt(dst, "num_ctx", st.NumCtx, true)
		dst = appendInt(dst, "dropped", st.Dropped, true)
		dst = appendInt(dst, "summarized", st.Summarized, true)
		dst = appendInt(dst, "prompt_tokens", st.PromptTokens, true)
		dst = appendInt(dst, "completion_tokens", st.CompletionTokens, true)
		dst = appendInt(dst, "requests", st.Requests, false)
		dst = appendInt(dst, "truncations", st.Truncations, true)
		if !st.LastTruncation.IsZero() {
			dst, ok2 = appendJSONTime(dst, "last_truncation", st.LastTruncation)
			ok = ok && ok2
		}
		dst = appendInt(dst, "overflow_retries", st.OverflowRetries, true)
		if b := st.Budget; b != nil {
			dst = strconv.AppendInt(append(dst, `,"budget":{"total":`...), int64(b.Total), 10)
			dst = appendInt(dst, "system", b.System, false)
			dst = appendInt(dst, "tools", b.Tools, false)
			dst = appendInt(dst, "reserve", b.Reserve, false)
			dst = appendInt(dst, "conversation", b.Conversation, false)
			dst = append(dst, '}')
		}
		dst = append(dst, '}')
	}
	return append(dst, '}'), ok
}

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

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

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
	dst = jsonscan.AppendString(dst, m.Role)
	dst = append(dst, `,"content":`...)
	dst = jsonscan.AppendString(dst, m.Content)
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
	dst = jsonscan.AppendStringHTML(dst, info.ID)
	if info.Model != "" {
		dst = jsonscan.AppendStringHTML(appendName(dst, "model"), info.Model)
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
		dst = jsonscan.AppendString(appendName(dst, "model"), *d.Model)
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

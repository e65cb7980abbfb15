package snapshots

// A session is stored as a log of records, one per change, so that storing
// a turn costs the turn, not the conversation (the v1 format rewrote and
// re-compressed the whole session on every change). FileStore keeps one
// log file per session, RedisStore one list; both use the frames below.
//
// A frame is
//
//	uint32 LE  length of the payload
//	uint32 LE  CRC-32C (Castagnoli) of the 4 length bytes and the payload
//	payload    kind byte, listing entry (Listing JSON), '\n', body
//
// and the kinds are
//
//	'R' replace: the body is the whole session, gzip-compressed JSON (the
//	    v1 record's body). A new session, a replaced history (clear,
//	    restore, import, compress, in-band clear: any change that keeps
//	    none of the stored messages) and a compacted log start with one.
//	'A' append: the body is a JSON object {"at": N, "messages": […],
//	    "updated": …} plus whichever of "model", "created", "metadata",
//	    "stats" and "summaries" changed. Replaying it keeps the first N
//	    stored messages, appends "messages" and sets the fields present. A
//	    turn is at = the stored count; a client that resends its history
//	    with the last reply in another form is at = the count less one.
//
// Every record carries the listing entry of the session as it stands after
// the record, so an index is built by checking every frame's CRC and
// decoding only the last entry.
//
// Replay reads the frames in order. An incomplete frame at the end, or
// zeros there, is a write a crash interrupted before it was acknowledged:
// the tail is cut and nothing acknowledged is lost. A record that fails
// its checks (its CRC, a length field damaged so that it points past the
// end or into the next record, a payload that does not decode or is
// another session's) is corrupt. When whole records of the session follow
// it, it is skipped and they are kept: the log is not a tail to cut, and
// cutting it would throw away every later turn. When nothing valid follows
// it, the tail is cut there, as for a torn write, but counted as
// corruption. Either way a copy of the log's bytes is kept before anything
// is rewritten, and nothing in a bad record is ever read as data
// (logrecover.go says what a skipped record costs).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"reflect"
	"slices"
	"time"
)

const (
	kindReplace = 'R'
	kindAppend  = 'A'
	frameHeader = 8
	// maxFrame bounds a payload's length: a damaged length field beyond
	// it is the end of the good records, not a request to read gigabytes.
	maxFrame = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame returns the framed payload: length, CRC-32C, payload.
func frame(payload []byte) []byte {
	out := make([]byte, frameHeader, frameHeader+len(payload))
	binary.LittleEndian.PutUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	crc := crc32.Update(crc32.Checksum(out[:4], castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(out[4:], crc)
	return out
}

// frameState says what nextFrame found.
type frameState int

const (
	frameOK      frameState = iota
	frameEnd                // no bytes left
	frameTorn               // an incomplete frame, or zeros, at the end: an interrupted write
	frameCorrupt            // a whole frame that fails its CRC
)

// nextFrame reads the frame at the start of b and returns its payload and
// the frame's length in bytes.
func nextFrame(b []byte) (payload []byte, n int, state frameState) {
	switch {
	case len(b) == 0:
		return nil, 0, frameEnd
	case len(b) < frameHeader:
		return nil, 0, frameTorn
	}
	size := binary.LittleEndian.Uint32(b)
	if size > maxFrame || int(size) > len(b)-frameHeader {
		return nil, 0, frameTorn
	}
	n = frameHeader + int(size)
	payload = b[frameHeader:n]
	crc := crc32.Update(crc32.Checksum(b[:4], castagnoli), castagnoli, payload)
	if crc != binary.LittleEndian.Uint32(b[4:]) {
		// A file system may leave zeros where an interrupted write
		// extended the file; anything else is damage.
		if !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
			return nil, 0, frameTorn
		}
		return nil, 0, frameCorrupt
	}
	return payload, n, frameOK
}

// splitPayload returns a payload's kind, listing entry and body.
func splitPayload(p []byte) (kind byte, info, body []byte, err error) {
	if len(p) < 2 {
		return 0, nil, nil, fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	info, body, ok := bytes.Cut(p[1:], []byte{'\n'})
	if !ok {
		return 0, nil, nil, fmt.Errorf("%w: record without a listing entry", ErrCorrupt)
	}
	return p[0], info, body, nil
}

// payloadInfo decodes a payload's listing entry.
func payloadInfo(p []byte) (Listing, error) {
	var info Listing
	_, ib, _, err := splitPayload(p)
	if err == nil {
		if err = json.Unmarshal(ib, &info); err != nil {
			err = fmt.Errorf("%w: listing entry: %v", ErrCorrupt, err)
		}
	}
	return info, err
}

// delta is the body of an append record. Absent fields did not change;
// Metadata and Summaries are raw so that "null" (set to nothing) and
// absent (unchanged) differ.
type delta struct {
	At        int             `json:"at"`
	Messages  []Message       `json:"messages,omitempty"`
	Model     *string         `json:"model,omitempty"`
	Created   *time.Time      `json:"created,omitempty"`
	Updated   time.Time       `json:"updated"`
	Metadata  json.RawMessage `json:"metadata,omitempty"`
	Stats     *Stats          `json:"stats,omitempty"`
	Summaries json.RawMessage `json:"summaries,omitempty"`
}

// encodeChange returns the payload of the record that takes a session
// from old (nil: none) to s: an append record when s keeps some of old's
// messages (or old had none), else a replace record.
func encodeChange(old, s *Session) ([]byte, error) {
	if old == nil {
		return encodeReplace(s)
	}
	at := commonPrefix(old.Messages, s.Messages)
	if at == 0 && len(old.Messages) > 0 {
		return encodeReplace(s)
	}
	h := normalHead(s)
	d := delta{At: at, Updated: h.Updated}
	if h.Model != old.Model {
		d.Model = &h.Model
	}
	if !h.Created.Equal(old.Created) {
		d.Created = &h.Created
	}
	if h.Stats != old.Stats {
		d.Stats = &h.Stats
	}
	var err error
	if !reflect.DeepEqual(h.Metadata, old.Metadata) {
		if d.Metadata, err = marshal(h.Metadata); err != nil {
			return nil, fmt.Errorf("snapshots: encode metadata of %q: %w", s.ID, err)
		}
	}
	if !slices.Equal(h.Summaries, old.Summaries) {
		if d.Summaries, err = marshal(h.Summaries); err != nil {
			return nil, fmt.Errorf("snapshots: encode summaries of %q: %w", s.ID, err)
		}
	}
	body, err := marshal(&d)
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode session %q: %w", s.ID, err)
	}
	if body, err = withMessages(body, s.Messages[at:]); err != nil {
		return nil, err
	}
	return payload(kindAppend, s, body)
}

// encodeReplace returns the payload of a replace record of s.
func encodeReplace(s *Session) ([]byte, error) {
	body, err := encodeSession(s)
	if err != nil {
		return nil, err
	}
	if body, err = compress(body); err != nil {
		return nil, err
	}
	return payload(kindReplace, s, body)
}

// payload returns a record's payload: kind, s's listing entry, '\n',
// body. The listing entry is json.Marshal's (HTML escaping on, unlike the
// body's marshal): the form every stored log has.
func payload(kind byte, s *Session, body []byte) ([]byte, error) {
	info := s.Info()
	info.Snapshots = 0
	ib, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode info: %w", err)
	}
	p := make([]byte, 0, 2+len(ib)+len(body))
	p = append(p, kind)
	p = append(p, ib...)
	p = append(p, '\n')
	return append(p, body...), nil
}

// commonPrefix returns how many messages at the start of a and b are
// equal. Messages the caller did not touch share their strings and Raw
// bytes with the stored ones, so each comparison is usually a pointer
// check, not a scan of the text.
func commonPrefix(a, b []Message) int {
	n := 0
	for n < len(a) && n < len(b) && equalMessage(&a[n], &b[n]) {
		n++
	}
	return n
}

func equalMessage(a, b *Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Preserve == b.Preserve &&
		a.Timestamp.Equal(b.Timestamp) && bytes.Equal(a.Raw, b.Raw) &&
		(a.Importance == nil) == (b.Importance == nil) && (a.Importance == nil || *a.Importance == *b.Importance) &&
		(len(a.Metadata) == 0 && len(b.Metadata) == 0 || reflect.DeepEqual(a.Metadata, b.Metadata))
}

// apply changes s (nil: none yet) by one record for session id and
// returns the result. The result holds no part of p: encoding/json copies
// what it decodes, message Raw bytes included.
func apply(s *Session, id string, p []byte) (*Session, error) {
	return applyRecord(s, id, p, false)
}

// applyRecord is apply; afterLoss says that a record of the log before p
// was skipped as corrupt, so that p may build on a change that is lost:
// an append record then keeps all the messages there are when it says it
// keeps more, and one with nothing before it starts a session of its own
// (logrecover.go). A record that fails leaves s as it was.
func applyRecord(s *Session, id string, p []byte, afterLoss bool) (*Session, error) {
	kind, ib, body, err := splitPayload(p)
	if err != nil {
		return nil, err
	}
	// A log is stored under the hash of its id; a record of another id
	// is someone else's (or a forged file): never hand it out.
	if match, err := infoIs(ib, id); err != nil {
		return nil, err
	} else if !match {
		return nil, fmt.Errorf("%w: record holds another session id", ErrCorrupt)
	}
	switch kind {
	case kindReplace:
		plain, err := gunzip(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		n, err := decodeSession(plain)
		if err == nil && n.ID != id {
			err = fmt.Errorf("%w: record holds another session id", ErrCorrupt)
		}
		return n, err
	case kindAppend:
		if s == nil && !afterLoss {
			return nil, fmt.Errorf("%w: an append record with nothing before it", ErrCorrupt)
		}
		var d delta
		if err := json.Unmarshal(body, &d); err != nil {
			return nil, fmt.Errorf("%w: append record: %v", ErrCorrupt, err)
		}
		// Everything is decoded before s changes, so that a record
		// that fails is skipped whole.
		var md map[string]any
		if d.Metadata != nil {
			if err := json.Unmarshal(d.Metadata, &md); err != nil {
				return nil, fmt.Errorf("%w: metadata: %v", ErrCorrupt, err)
			}
		}
		var sums []Summary
		if d.Summaries != nil {
			if err := json.Unmarshal(d.Summaries, &sums); err != nil {
				return nil, fmt.Errorf("%w: summaries: %v", ErrCorrupt, err)
			}
		}
		if s == nil {
			info, err := payloadInfo(p)
			if err != nil {
				return nil, err
			}
			s = &Session{ID: id, Model: info.Model, Created: info.Created}
		}
		if afterLoss && d.At > len(s.Messages) {
			d.At = len(s.Messages)
		}
		if d.At < 0 || d.At > len(s.Messages) {
			return nil, fmt.Errorf("%w: append record keeps %d of %d messages", ErrCorrupt, d.At, len(s.Messages))
		}
		s.Messages = append(s.Messages[:d.At], d.Messages...)
		s.Updated = d.Updated
		if d.Model != nil {
			s.Model = *d.Model
		}
		if d.Created != nil {
			s.Created = *d.Created
		}
		if d.Stats != nil {
			s.Stats = *d.Stats
		}
		if d.Metadata != nil {
			s.Metadata = md
		}
		if d.Summaries != nil {
			s.Summaries = sums
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: unknown record kind %q", ErrCorrupt, kind)
}

// infoIs reports whether the listing entry ib is of session id.
func infoIs(ib []byte, id string) (bool, error) {
	var info struct {
		ID string `json:"session_id"`
	}
	if err := json.Unmarshal(ib, &info); err != nil {
		return false, fmt.Errorf("%w: listing entry: %v", ErrCorrupt, err)
	}
	return info.ID == id, nil
}

// sessionBytes estimates the memory a decoded session holds, for the
// cache's bound.
func sessionBytes(s *Session) int {
	n := 512
	for i := range s.Messages {
		n += 160 + len(s.Messages[i].Content) + len(s.Messages[i].Raw)
	}
	for i := range s.Summaries {
		n += 96 + len(s.Summaries[i].Text)
	}
	return n
}

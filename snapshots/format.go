package snapshots

// The stored form of a session or a snapshot, in a file or a Redis value.
//
// A record is gzip-compressed (chat text shrinks about 4 times) and,
// uncompressed, is two lines of JSON:
//
//	{"format":"ctxproxy.session","version":1,"sha256":"…","info":{…}}
//	{…the Session or Snapshot…}
//
// The first line says what the record is and carries its listing entry
// (Listing or SnapshotInfo), so an index can be built without decoding
// the conversation. sha256 is the hex SHA-256 of the info bytes followed by
// the body bytes. A record is accepted only when gzip's own CRC-32 and
// length check out (truncation, appended garbage, flipped bits) and the
// SHA-256 matches, so that corruption is found and reported, never read
// as data. Both lines are readable with standard tools: gunzip -c FILE | jq .
//
// Message Raw bytes are written verbatim, never re-encoded, so a stored
// conversation replays byte for byte; encoding/json would compact them and
// escape <, > and & otherwise.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

const (
	formatSession  = "ctxproxy.session"
	formatSnapshot = "ctxproxy.snapshot"
	formatVersion  = 1
)

// ErrCorrupt reports a stored record that failed its checks. The error
// says what failed; the store logs it, sets the record aside and goes on
// with the others.
var ErrCorrupt = errors.New("snapshots: corrupt record")

type header struct {
	Format  string          `json:"format"`
	Version int             `json:"version"`
	SHA256  string          `json:"sha256"`
	Info    json.RawMessage `json:"info"`
}

// gzip.Writer holds about 800 KB of compressor state: reuse them.
var gzipWriters = sync.Pool{New: func() any {
	// BestSpeed: a session is rewritten after every response, and on
	// chat text it costs about 15% more bytes than the default level for
	// a fifth of the CPU (BenchmarkGzipLevel, docs/benchmarks.md).
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

var gzipReaders sync.Pool // *gzip.Reader

// seal frames info and body into a compressed record.
func seal(format string, info any, body []byte) ([]byte, error) {
	ib, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode info: %w", err)
	}
	h := sha256.New()
	h.Write(ib)
	h.Write(body)
	hb, err := json.Marshal(header{Format: format, Version: formatVersion, SHA256: hex.EncodeToString(h.Sum(nil)), Info: ib})
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode header: %w", err)
	}
	return compress(hb, []byte{'\n'}, body, []byte{'\n'})
}

// compress returns the parts, concatenated and gzip-compressed.
func compress(parts ...[]byte) ([]byte, error) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var out bytes.Buffer
	out.Grow(n/3 + 64)
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&out)
	for _, p := range parts {
		zw.Write(p)
	}
	if err := zw.Close(); err != nil { // writes to a bytes.Buffer cannot fail
		return nil, fmt.Errorf("snapshots: compress: %w", err)
	}
	return out.Bytes(), nil
}

// unseal checks a compressed record of the given format and returns its info
// and body bytes. Every failure wraps ErrCorrupt.
func unseal(data []byte, format string) (info, body []byte, err error) {
	plain, err := gunzip(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	line, rest, ok := bytes.Cut(plain, []byte{'\n'})
	if !ok || len(rest) == 0 || rest[len(rest)-1] != '\n' {
		return nil, nil, fmt.Errorf("%w: not a %s record", ErrCorrupt, format)
	}
	body = rest[:len(rest)-1]
	var h header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	if h.Format != format {
		return nil, nil, fmt.Errorf("%w: format %q, want %q", ErrCorrupt, h.Format, format)
	}
	if h.Version != formatVersion {
		return nil, nil, fmt.Errorf("%w: %s version %d, this ctxproxy reads version %d", ErrCorrupt, format, h.Version, formatVersion)
	}
	sum := sha256.New()
	sum.Write(h.Info)
	sum.Write(body)
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		return nil, nil, fmt.Errorf("%w: sha256 mismatch", ErrCorrupt)
	}
	return h.Info, body, nil
}

// gunzip decompresses data whole. Reading to the end is what makes the gzip
// reader check the CRC-32 and length trailer, and reject bytes after it.
func gunzip(data []byte) ([]byte, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = zr.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return nil, err
	}
	defer gzipReaders.Put(zr)
	var out bytes.Buffer
	out.Grow(4 * len(data))
	if _, err := io.Copy(&out, zr); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return out.Bytes(), nil
}

// normalHead returns s without its messages, in the form it is stored:
// times in UTC, usage finite.
func normalHead(s *Session) Session {
	head := *s
	head.Messages = nil
	head.Created = head.Created.UTC()
	head.Updated = head.Updated.UTC()
	head.Stats.LastTruncation = head.Stats.LastTruncation.UTC()
	if len(head.Summaries) > 0 {
		head.Summaries = make([]Summary, len(s.Summaries))
		for i, sum := range s.Summaries {
			sum.Created = sum.Created.UTC()
			head.Summaries[i] = sum
		}
	}
	head.Stats.Usage = finite(head.Stats.Usage)
	return head
}

// encodeSession returns the body of a session record.
func encodeSession(s *Session) ([]byte, error) {
	head := normalHead(s)
	b, err := marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode session %q: %w", s.ID, err)
	}
	return withMessages(b, s.Messages)
}

// encodeSnapshot returns the body of a snapshot record.
func encodeSnapshot(snap *Snapshot) ([]byte, error) {
	head := *snap
	head.Messages = nil
	head.Created = head.Created.UTC()
	head.Usage = finite(head.Usage)
	b, err := marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("snapshots: encode snapshot %q: %w", snap.ID, err)
	}
	return withMessages(b, snap.Messages)
}

// withMessages appends ,"messages":[…] to the JSON object that ends obj,
// in obj's spare capacity when it has enough (obj is not used again).
func withMessages(obj []byte, msgs []Message) ([]byte, error) {
	if len(msgs) == 0 {
		return obj, nil
	}
	out := obj[:len(obj)-1]
	if n := len(obj) + 16 + messagesSize(msgs); cap(out) < n {
		out = append(make([]byte, 0, n), out...)
	}
	out = append(out, `,"messages":`...)
	out, err := appendMessages(out, msgs)
	if err != nil {
		return nil, err
	}
	return append(out, '}'), nil
}

// messagesSize estimates the bytes of msgs as JSON: text and raw, keys
// and a timestamp.
func messagesSize(msgs []Message) int {
	n := 2
	for i := range msgs {
		n += 96 + len(msgs[i].Role) + len(msgs[i].Content) + len(msgs[i].Raw)
	}
	return n
}

// appendMessages appends msgs as a JSON array: each message as marshal
// writes it, less Raw, which is written verbatim after the other fields.
func appendMessages(out []byte, msgs []Message) ([]byte, error) {
	// One encoder for the array: a new one per message costs an
	// allocation or two each, for nothing.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	out = append(out, '[')
	for i := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		m := msgs[i]
		raw := trimSpace(m.Raw)
		if err := checkMessage(&m, raw); err != nil {
			return nil, fmt.Errorf("snapshots: message %d: %w", i, err)
		}
		m.Raw = nil
		m.Timestamp = m.Timestamp.UTC()
		buf.Reset()
		if err := enc.Encode(&m); err != nil {
			return nil, fmt.Errorf("snapshots: message %d: %w", i, err)
		}
		// The object less its closing brace and Encode's newline.
		out = append(out, buf.Bytes()[:buf.Len()-2]...)
		if raw != nil {
			out = append(out, `,"raw":`...)
			out = append(out, raw...)
		}
		out = append(out, '}')
	}
	return append(out, ']'), nil
}

// checkMessage refuses what would make a record unreadable later: an
// importance outside [0, 1], a Raw that is not a JSON object. Raw is
// checked for its braces only: it comes out of a JSON decoder (the proxy's
// or ours), and validating every raw message on every write cost 40% of
// the encoding (BenchmarkCodec100).
func checkMessage(m *Message, raw []byte) error {
	if m.Importance != nil {
		if v := *m.Importance; !(v >= 0 && v <= 1) {
			return fmt.Errorf("importance %v outside [0, 1]", v)
		}
	}
	if m.Raw != nil && (len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}') {
		return errors.New("raw is not a JSON object")
	}
	return nil
}

// marshal is json.Marshal without escaping <, > and &, which chat text is
// full of: records and exports stay readable by people.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'}), nil
}

// finite returns v, or 0 for NaN and infinities, which JSON cannot carry:
// a bad usage figure must not make a whole session unsavable.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// trimSpace trims JSON whitespace; a decoded json.RawMessage has none
// around it, so a trimmed Raw is what comes back.
func trimSpace(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Trim(b, " \t\r\n")
}

func decodeSession(body []byte) (*Session, error) {
	var s Session
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("%w: session: %v", ErrCorrupt, err)
	}
	return &s, nil
}

func decodeSnapshot(body []byte) (*Snapshot, error) {
	var snap Snapshot
	if err := json.Unmarshal(body, &snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, err)
	}
	return &snap, nil
}

// change is the part of Update both stores share: fn runs on a copy of
// the stored session old (a new one when old is nil and create is set),
// which is then stamped and encoded as the payload of the record that
// takes old to it: a replace record when whole is set. old is not
// changed.
func change(old *Session, id string, create, whole bool, now time.Time, fn func(*Session) error) ([]byte, error) {
	var s *Session
	switch {
	case old != nil:
		s = old.Clone()
	case !create:
		return nil, ErrNotFound
	default:
		s = &Session{ID: id, Created: now}
	}
	if err := fn(s); err != nil {
		return nil, err
	}
	s.ID = id
	if s.Created.IsZero() {
		s.Created = now
	}
	s.Updated = now
	if whole {
		return encodeReplace(s)
	}
	return encodeChange(old, s)
}

// sessionRecord encodes s as a v1 record with its listing entry (the
// format sessions were stored in before the log; kept for the tests of
// migration).
func sessionRecord(s *Session) ([]byte, Listing, error) {
	body, err := encodeSession(s)
	if err != nil {
		return nil, Listing{}, err
	}
	info := s.Info()
	data, err := seal(formatSession, info, body)
	return data, info, err
}

// snapshotRecord encodes snap with its listing entry (Bytes excluded: the
// size is known only after compressing).
func snapshotRecord(snap *Snapshot) ([]byte, SnapshotInfo, error) {
	body, err := encodeSnapshot(snap)
	if err != nil {
		return nil, SnapshotInfo{}, err
	}
	info := snap.Info()
	data, err := seal(formatSnapshot, info, body)
	info.Bytes = len(data)
	return data, info, err
}

// readSession decodes a session record, checking that it belongs to id.
func readSession(data []byte, id string) (*Session, error) {
	_, body, err := unseal(data, formatSession)
	if err != nil {
		return nil, err
	}
	s, err := decodeSession(body)
	if err != nil {
		return nil, err
	}
	// The record is stored under the hash of id; a record holding another
	// id is someone else's (or a forged file): never hand it out.
	if s.ID != id {
		return nil, fmt.Errorf("%w: record holds another session id", ErrCorrupt)
	}
	return s, nil
}

// readSnapshot decodes a snapshot record, checking that it is snapID of
// session id.
func readSnapshot(data []byte, id, snapID string) (*Snapshot, error) {
	_, body, err := unseal(data, formatSnapshot)
	if err != nil {
		return nil, err
	}
	snap, err := decodeSnapshot(body)
	if err != nil {
		return nil, err
	}
	if snap.SessionID != id || snap.ID != snapID {
		return nil, fmt.Errorf("%w: record holds another snapshot", ErrCorrupt)
	}
	return snap, nil
}

// readInfo checks a record and returns its listing entry without decoding
// the conversation.
func readInfo[T any](data []byte, format string) (T, error) {
	var info T
	ib, _, err := unseal(data, format)
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(ib, &info); err != nil {
		return info, fmt.Errorf("%w: info: %v", ErrCorrupt, err)
	}
	return info, nil
}

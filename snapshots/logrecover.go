package snapshots

// A record in the middle of a log can go bad: a bit flipped on disk, a
// sector lost, zeros an OS crash left where pages were not written back,
// a hand edit. The records after it are whole, and a turn acknowledged
// after the bad one must not be lost with it, so replay skips a corrupt
// record that has valid records of its session after it and keeps them;
// only a tail with nothing valid after it is cut.
//
// Within a file, a record is found by the length field of the one before
// it, and a damaged length field leaves no way to step over the record:
// it may point past the end (which looks like a torn write) or into the
// next record. So replay looks for the next record instead: an offset
// where a whole frame passes its CRC-32C and holds a record of this
// session (resync). A Redis list delimits its elements, so there the next
// element is the next record.
//
// What a skipped record costs is its own change, and only that:
//
//   - An append record (a turn) added messages and set the fields that
//     changed. The later records are replayed as usual, except that one
//     whose "at" lies beyond the messages replayed so far (the lost
//     record added them) is applied at the count there is: its turn is
//     kept, after the messages before the lost one. A field that only the
//     lost record set (metadata, say) keeps its earlier value; the
//     statistics are set again by every turn.
//   - A replace record (a new, cleared, restored, imported or compacted
//     history) held the whole history at that point. The later records
//     are applied to the history before it, or, when it was the first
//     record, to an empty session of the same id whose model and creation
//     time come from the later record's listing entry: the history it
//     held is lost, the turns after it are kept.
//
// The store then keeps a copy of the original bytes, writes the recovered
// session back as one replace record (as compaction does), so that the
// next read finds a whole log, and counts and logs what it did
// (Counters.Corrupt and Counters.Skipped, an ERROR with where the copy
// is).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
)

// replayed is what replaying a log found.
type replayed struct {
	s    *Session
	good int   // bytes up to the end of the last good record
	base int   // bytes up to the end of the last replace record
	cut  error // why the tail was cut: errTorn or an ErrCorrupt; nil when none was
	// lost are the corrupt records skipped, each with valid records
	// after it; kept counts the records applied after the first of them.
	lost []lostRecord
	kept int
}

// lostRecord is a corrupt record replay skipped: at its byte offset in
// the log (FileStore) or its index in the list (RedisStore), n bytes up
// to the next valid record.
type lostRecord struct {
	at, n int
	cause error
}

// errTorn reports a log that ends in an incomplete record: a write that a
// crash interrupted before it was acknowledged.
var errTorn = errors.New("snapshots: the log ends in an interrupted write")

// replay applies the frames in b (which starts at byte offset start of the
// log) for session id. A frame or record that fails is skipped when a
// valid record of the session follows it (resync), and ends the replay
// otherwise: that tail is what the caller cuts.
func replay(b []byte, start int, id string) replayed {
	r := replayed{good: start, base: start}
	ours := func(ib []byte) bool {
		match, err := infoIs(ib, id)
		return err == nil && match
	}
	budget := resyncBudget(b)
	for off := 0; ; {
		p, n, state := nextFrame(b[off:])
		var cause error
		from := off + 1 // where the next record may start
		switch state {
		case frameEnd:
			return r
		case frameTorn:
			cause = errTorn
		case frameCorrupt:
			cause = fmt.Errorf("%w: record at byte %d fails its CRC-32C", ErrCorrupt, start+off)
		case frameOK:
			s, err := applyRecord(r.s, id, p, len(r.lost) > 0)
			if err == nil {
				r.s = s
				off += n
				r.good = start + off
				if p[0] == kindReplace {
					r.base = r.good
				}
				if len(r.lost) > 0 {
					r.kept++
				}
				continue
			}
			// A whole frame: its length is right.
			cause, from = fmt.Errorf("record at byte %d: %w", start+off, err), off+n
		}
		next := resync(b, from, ours, &budget)
		if next < 0 {
			r.cut = cause
			return r
		}
		if state == frameTorn {
			cause = fmt.Errorf("%w: record at byte %d: its length field points past the end of the log, "+
				"and a whole record follows at byte %d", ErrCorrupt, start+off, start+next)
		}
		r.lost = append(r.lost, lostRecord{at: start + off, n: next - off, cause: cause})
		off = next
	}
}

// replayList applies a Redis list's elements, one record each, for
// session id, skipping those that fail.
func replayList(recs []string, id string) replayed {
	var r replayed
	for i, rec := range recs {
		p, n, state := nextFrame([]byte(rec))
		var err error
		if state != frameOK || n != len(rec) {
			err = fmt.Errorf("%w: record %d fails its CRC-32C", ErrCorrupt, i)
		} else {
			var s *Session
			if s, err = applyRecord(r.s, id, p, len(r.lost) > 0); err == nil {
				r.s = s
				r.good += len(rec)
				if p[0] == kindReplace {
					r.base = r.good
				}
				if len(r.lost) > 0 {
					r.kept++
				}
				continue
			}
			err = fmt.Errorf("record %d: %w", i, err)
		}
		r.lost = append(r.lost, lostRecord{at: i, n: len(rec), cause: err})
	}
	return r
}

// infoStart starts every record's listing entry, after its kind byte
// (json.Marshal of a Listing).
var infoStart = []byte(`{"session_id":`)

// resync returns the offset, from or after it, of the first frame in b
// that is whole, passes its CRC-32C and holds a record that ours accepts
// (by its listing entry), or -1 when there is none. Only offsets where a
// listing entry starts one kind byte after a frame header are tried, and
// the bytes checksummed for them come out of *budget (resyncBudget, for
// all the resyncs of one log), so that a log full of look-alikes costs a
// bounded scan, not a CRC of the rest of the log at every byte; a log
// that spends it is treated as if nothing valid followed. The chance that
// damaged bytes pass as a record is that of a CRC-32C collision on bytes
// that also start like a record of this session.
func resync(b []byte, from int, ours func(ib []byte) bool, budget *int) int {
	for from >= 0 && from+frameHeader+1 < len(b) {
		i := bytes.Index(b[from+frameHeader+1:], infoStart)
		if i < 0 {
			return -1
		}
		at := from + i // the frame whose payload's listing entry starts there
		from = at + 1
		if k := b[at+frameHeader]; k != kindReplace && k != kindAppend {
			continue
		}
		size := binary.LittleEndian.Uint32(b[at:])
		if size > maxFrame || int(size) > len(b)-at-frameHeader {
			continue
		}
		if *budget -= int(size); *budget < 0 {
			return -1
		}
		payload := b[at+frameHeader : at+frameHeader+int(size)]
		crc := crc32.Update(crc32.Checksum(b[at:at+4], castagnoli), castagnoli, payload)
		if crc != binary.LittleEndian.Uint32(b[at+4:]) {
			continue
		}
		if _, ib, _, err := splitPayload(payload); err == nil && ours(ib) {
			return at
		}
	}
	return -1
}

// resyncBudget is how many bytes the resyncs of log b may checksum: a
// few times the log, beyond the records a repair reads anyway.
func resyncBudget(b []byte) int { return 4*len(b) + 1<<20 }

// ofKey returns the test resync needs when only the log's key k is
// known (the scan at start, before any record is decoded): the listing
// entry's session id hashes to k.
func ofKey(k string) func(ib []byte) bool {
	return func(ib []byte) bool {
		var info struct {
			ID string `json:"session_id"`
		}
		return json.Unmarshal(ib, &info) == nil && key(info.ID) == k
	}
}

// reportLost counts and logs the corrupt records replay skipped, once a
// copy of the log they were in is kept; where names the log and the copy
// (slog attributes).
func reportLost(log *slog.Logger, c *counters, r replayed, where ...any) {
	n := uint64(len(r.lost))
	c.corrupt.Add(n)
	c.skipped.Add(n)
	causes := make([]error, len(r.lost))
	for i, l := range r.lost {
		causes[i] = l.cause
	}
	log.Error("snapshots: corrupt records skipped in a session log; the records after them are kept, "+
		"a copy of the log as it was is kept, and the log is rewritten without them",
		append(where, "kept", r.kept, "lost", len(r.lost), "err", errors.Join(causes...))...)
}

// lostAt lists where the skipped records were: byte offsets or indexes.
func (r replayed) lostAt() []int {
	at := make([]int, len(r.lost))
	for i, l := range r.lost {
		at[i] = l.at
	}
	return at
}

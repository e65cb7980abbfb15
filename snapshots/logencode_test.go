package snapshots

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// checkEncode fails t when a fast encoder writes other bytes than
// encoding/json for what it accepts.
func checkEncode(t *testing.T, m *Message, d *delta, info *SessionInfo) {
	t.Helper()
	if m != nil {
		want, err := marshal(m)
		got, ok := appendMessageHead(nil, m)
		if ok && (err != nil || !bytes.Equal(append(got, '}'), want)) {
			t.Fatalf("message %#v:\nmarshal %s (%v)\nfast    %s}", m, want, err, got)
		}
	}
	if d != nil {
		want, err := marshal(d)
		got, ok := appendDelta(nil, d)
		if ok && (err != nil || !bytes.Equal(got, want)) {
			t.Fatalf("delta:\nmarshal %s (%v)\nfast    %s", want, err, got)
		}
	}
	if info != nil {
		want, err := json.Marshal(info)
		got, ok := appendInfo(nil, info)
		if ok && (err != nil || !bytes.Equal(got, want)) {
			t.Fatalf("listing entry:\njson %s (%v)\nfast %s", want, err, got)
		}
	}
}

// checkString fails t when the string encoder the records use
// (jsonscan's) writes s otherwise than encoding/json, with HTML escaping
// and without.
func checkString(t *testing.T, s string) {
	t.Helper()
	want, _ := marshal(s)
	if got := jsonscan.AppendString(nil, s); !bytes.Equal(got, want) {
		t.Fatalf("%q: marshal %s, fast %s", s, want, got)
	}
	want, _ = json.Marshal(s)
	if got := jsonscan.AppendStringHTML(nil, s); !bytes.Equal(got, want) {
		t.Fatalf("%q: json.Marshal %s, fast %s", s, want, got)
	}
}

// oddTime returns a time encoding/json may write differently or refuse:
// zones, years out of RFC 3339's range, the zero time.
func oddTime(r *rand.Rand) time.Time {
	times := []time.Time{{}, t0, t0.Local(), t0.In(time.FixedZone("X", -5*3600)), t0.In(time.FixedZone("UTC", 0)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Unix(0, 0).UTC(), t0.Add(time.Duration(r.Int64N(1e18))).UTC(), time.Now().UTC()}
	return times[r.IntN(len(times))]
}

// oddFloat returns a float of every form encoding/json writes.
func oddFloat(r *rand.Rand) float64 {
	fs := []float64{0, math.Copysign(0, -1), 1, 0.5, 1e-6, 9.99e-7, 1e-7, 1.5e-300, 1e20, 1e21, 123456789.125,
		r.Float64(), r.NormFloat64() * 1e25, math.SmallestNonzeroFloat64, math.MaxFloat64, math.NaN(), math.Inf(1)}
	return fs[r.IntN(len(fs))]
}

// The fast encoders write encoding/json's bytes for random messages,
// append record bodies and listing entries, and for tricky strings.
func TestFastEncode(t *testing.T) {
	for _, s := range []string{"", "plain", `"quoted" \ back`, "<b>&</b>", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"é日本🙂", "\u2028\u2029", "\xff\xfe", "a\xe2\x80", "\xed\xa0\x80", "\ufffd", string(rune(0x10ffff))} {
		checkString(t, s)
	}
	r := rand.New(rand.NewPCG(3, 4))
	fast := 0
	for range 3000 {
		checkString(t, randomText(r))
		m := randomMessage(r)
		m.Raw = nil
		if r.IntN(2) == 0 {
			m.Timestamp = oddTime(r)
		}
		if r.IntN(4) == 0 && m.Importance != nil {
			m.Importance = ptr(oddFloat(r))
		}
		m.Timestamp = m.Timestamp.UTC()
		if m.Importance == nil || !math.IsNaN(*m.Importance) && !math.IsInf(*m.Importance, 0) {
			checkEncode(t, &m, nil, nil)
		}
		_, s := randomChange(r)
		if r.IntN(3) == 0 {
			s.Created, s.Updated, s.Stats.LastTruncation = oddTime(r), oddTime(r), oddTime(r)
			s.Stats.Usage = oddFloat(r)
		}
		info := s.Info()
		checkEncode(t, nil, nil, &info)
		h := normalHead(s)
		d := delta{At: r.IntN(5), Updated: h.Updated, Stats: &h.Stats, Model: &h.Model, Created: &h.Created}
		if r.IntN(2) == 0 {
			d.Stats, d.Model, d.Created = nil, nil, nil
		}
		if r.IntN(4) == 0 {
			d.Metadata, _ = marshal(h.Metadata)
		}
		checkEncode(t, nil, &d, nil)
		if _, ok := appendDelta(nil, &d); ok {
			fast++
		}
	}
	if fast < 1000 {
		t.Errorf("the fast encoder wrote %d of 3000 bodies", fast)
	}
}

// A turn's messages, body and listing entry take the fast encoder.
func TestEncodeTurnFast(t *testing.T) {
	old, _ := turnRecord(t)
	s := old.Clone()
	s.Messages = append(s.Messages, benchSession("bench").Messages[10:12]...)
	s.Stats.Requests++
	s.Stats.Budget = &Allocation{Total: 1}
	h := normalHead(s)
	d := delta{At: 10, Updated: h.Updated, Stats: &h.Stats}
	info := s.Info()
	for i := range s.Messages {
		m := s.Messages[i]
		m.Timestamp = m.Timestamp.UTC()
		if _, ok := appendMessageHead(nil, &m); !ok {
			t.Errorf("message %d left to encoding/json", i)
		}
	}
	if _, ok := appendDelta(nil, &d); !ok {
		t.Error("body left to encoding/json")
	}
	if _, ok := appendInfo(nil, &info); !ok {
		t.Error("listing entry left to encoding/json")
	}
}

// checkCodec holds the fast decoders and encoders to encoding/json on
// data: as a record to decode, as a string to write, and, decoded by
// encoding/json, as messages, a body and a listing entry to write.
func checkCodec(t *testing.T, data []byte) {
	checkFast(t, data)
	checkString(t, string(data))
	var d delta
	if json.Unmarshal(data, &d) == nil {
		for i := range d.Messages {
			m := d.Messages[i]
			m.Raw = nil
			m.Timestamp = m.Timestamp.UTC()
			checkEncode(t, &m, nil, nil)
		}
		d.Messages = nil
		checkEncode(t, nil, &d, nil)
	}
	var info SessionInfo
	if json.Unmarshal(data, &info) == nil {
		checkEncode(t, nil, nil, &info)
	}
}

// Encoding a turn takes the fast encoder: a fall back to encoding/json
// would show as four times the allocations.
func TestEncodeTurnAllocs(t *testing.T) {
	old, _ := turnRecord(t)
	s := old.Clone()
	s.Messages = append(s.Messages, benchSession("bench").Messages[10:12]...)
	s.Stats.Requests++
	n := testing.AllocsPerRun(100, func() {
		if _, err := encodeChange(old, s); err != nil {
			t.Fatal(err)
		}
	})
	if n > 9 {
		t.Errorf("encoding a turn: %v allocations, want at most 9 (6 when written)", n)
	}
}

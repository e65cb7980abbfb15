package edge

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// deadlineWriter is a ResponseWriter whose connection takes read
// deadlines, counting how often one is set.
type deadlineWriter struct {
	http.ResponseWriter
	sets int
	last time.Time
}

// TestRateBodyDeadlines: a body the rate allows at most wholeBodyTime
// costs two deadline changes however it is read, the first its whole
// time; a longer one moves its deadline with every read. Both end with
// no deadline, so the answer may take its time.
func TestRateBodyDeadlines(t *testing.T) {
	g := NewGate(Limits{MinBodyRate: 1000, BodyGrace: time.Second}, 1<<20, nil)
	for _, c := range []struct {
		size      int
		wantWhole bool
	}{{1000, true}, {10000, true}, {10001, false}, {20000, false}} {
		r := httptest.NewRequest(http.MethodPost, "/api/chat", iotest.OneByteReader(strings.NewReader(strings.Repeat("x", c.size))))
		r.ContentLength = int64(c.size)
		w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
		g.LimitRate(w, r)
		first := w.last
		if want := time.Second + time.Duration(c.size)*time.Millisecond; c.wantWhole && time.Until(first) < want-time.Second {
			t.Errorf("%d bytes: first deadline %s away, want about %s", c.size, time.Until(first).Round(time.Millisecond), want)
		}
		if b, err := io.ReadAll(r.Body); err != nil || len(b) != c.size {
			t.Fatalf("%d bytes: read %d, %v", c.size, len(b), err)
		}
		if c.wantWhole && w.sets != 2 {
			t.Errorf("%d bytes: %d deadline changes, want 2 (set, clear)", c.size, w.sets)
		}
		if !c.wantWhole && w.sets < c.size {
			t.Errorf("%d bytes read a byte at a time: %d deadline changes, want one a read", c.size, w.sets)
		}
		if !w.last.IsZero() {
			t.Errorf("%d bytes: the deadline is still set after the body", c.size)
		}
	}
}

func (d *deadlineWriter) SetReadDeadline(t time.Time) error {
	d.sets++
	d.last = t
	return nil
}

package rewrite

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// X-Ctxproxy-Max-Messages: the cap holds below the threshold too, keeps
// tool units whole, keeps system messages and the newest turn, and counts
// markers.
func TestMaxMessages(t *testing.T) {
	msgs := numbered(
		sys("s"), user("task"), call("a"), result("a", "ra"), asst("done a"),
		user("more"), call("b", "c"), result("b", "rb"), result("c", "rc"), asst("done"), user("last?"),
	)
	tr := newTrimmer(t, Config{})
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, rangeInts(0, 11)},
		{20, rangeInts(0, 11)},
		{6, []int{0, 5, 6, 7, 8, 9, 10}}, // the unit b+c stays whole
		{5, []int{0, -1, 9, 10}},         // the unit goes whole; a marker keeps the alternation
		{1, []int{0, 10}},                // the newest turn stays
		{3, []int{0, -1, 9, 10}},         // a marker counts
		{4, []int{0, -1, 9, 10}},         // 5 would need the whole unit of 4 messages
	} {
		res, err := tr.Trim(t.Context(), Request{MaxMessages: tc.n}, msgs, 100000, counter) // far below the threshold
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, ids(res.Messages)); diff != "" {
			t.Errorf("cap %d (-want +got):\n%s", tc.n, diff)
		}
		if orph := orphanTools(res.Messages); anyTrue(orph) {
			t.Errorf("cap %d: orphan tool results %v", tc.n, orph)
		}
		if tc.n > 0 && len(tc.want) < len(msgs) && !strings.Contains(res.Notice, "Capped at") {
			t.Errorf("cap %d: notice %q", tc.n, res.Notice)
		}
	}
}

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

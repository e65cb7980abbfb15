package gpu

import "testing"

// One model on two servers of different free memory: each server's
// num_ctx is sized from its own memory and held on its own, and the
// samples of one do not count toward a move on the other.
func TestSizerServersAreIndependent(t *testing.T) {
	s := NewSizer(Config{})
	f := facts(t, "llama3.1-8b")
	big := Workload{Name: "llama3.1:8b", Server: "big", Facts: f}
	small := Workload{Name: "llama3.1:8b", Server: "small", Facts: f}
	// What a Sizer of one server decides for each memory.
	want := func(free uint64) int {
		return NewSizer(Config{}).Decide(Workload{Name: big.Name, Facts: f}, snap(1, free)).NumCtx
	}
	wantBig, wantSmall := want(20*gb), want(4*gb)
	if wantBig == wantSmall {
		t.Fatalf("the two memories give one num_ctx (%d): the test proves nothing", wantBig)
	}
	// The same sample number on both servers: each reading is a server's
	// own, whatever its number.
	if d := s.Decide(big, snap(1, 20*gb)); d.NumCtx != wantBig {
		t.Errorf("big: NumCtx = %d, want %d (%s)", d.NumCtx, wantBig, d.Reason)
	}
	if d := s.Decide(small, snap(1, 4*gb)); d.NumCtx != wantSmall {
		t.Errorf("small: NumCtx = %d, want %d (%s)", d.NumCtx, wantSmall, d.Reason)
	}
	// Samples alternate: neither server's hold moves, each agreeing with
	// its own memory every time.
	for seq := uint64(2); seq < 6; seq++ {
		if d := s.Decide(big, snap(seq, 20*gb)); d.NumCtx != wantBig {
			t.Fatalf("big, sample %d: NumCtx = %d, want %d (%s)", seq, d.NumCtx, wantBig, d.Reason)
		}
		if d := s.Decide(small, snap(seq, 4*gb)); d.NumCtx != wantSmall {
			t.Fatalf("small, sample %d: NumCtx = %d, want %d (%s)", seq, d.NumCtx, wantSmall, d.Reason)
		}
	}
	// A single backend (no server) is a third holder, as before servers.
	if d := s.Decide(Workload{Name: big.Name, Facts: f}, snap(9, 8*gb)); d.NumCtx != want(8*gb) {
		t.Errorf("no server: NumCtx = %d, want %d", d.NumCtx, want(8*gb))
	}
	if n := s.models.Len(); n != 3 {
		t.Errorf("%d holds, want 3 (one per server and one without)", n)
	}
	// Forget drops the model on every server.
	s.Forget(big.Name)
	if n := s.models.Len(); n != 0 {
		t.Errorf("after Forget %d holds remain", n)
	}
}

// A server's hold moves after two of its own samples agree, as a single
// backend's does; another server's samples in between change nothing.
func TestSizerServerHysteresisIsItsOwn(t *testing.T) {
	s := NewSizer(Config{})
	f := facts(t, "llama3.1-8b")
	a := Workload{Name: "llama3.1:8b", Server: "a", Facts: f}
	b := Workload{Name: "llama3.1:8b", Server: "b", Facts: f}
	held := s.Decide(a, snap(1, 20*gb)).NumCtx
	s.Decide(b, snap(1, 20*gb))
	// a's memory falls a little (no danger): one sample holds.
	if d := s.Decide(a, snap(2, 16*gb)); d.NumCtx != held {
		t.Fatalf("a after one lower sample: NumCtx = %d, want %d held (%s)", d.NumCtx, held, d.Reason)
	}
	// b's samples, lower too, do not count as a's second.
	s.Decide(b, snap(2, 16*gb))
	s.Decide(b, snap(3, 16*gb))
	if d := s.Decide(a, snap(2, 16*gb)); d.NumCtx != held {
		t.Errorf("a after b's samples: NumCtx = %d, want %d held (%s)", d.NumCtx, held, d.Reason)
	}
	if d := s.Decide(a, snap(3, 16*gb)); d.NumCtx >= held {
		t.Errorf("a after its second lower sample: NumCtx = %d, want below %d (%s)", d.NumCtx, held, d.Reason)
	}
}

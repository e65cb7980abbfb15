package snapshots

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCollect: sessions idle past the TTL go, then the least recently
// updated beyond the cap; their snapshots go with them; the others stay.
func TestCollect(t *testing.T) {
	st := newFileStore(t, t.TempDir(), Config{})
	clock := t0
	st.now = func() time.Time { return clock }
	ctx := context.Background()
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		clock = t0.Add(time.Duration(i) * time.Hour) // a oldest, e newest
		if err := st.Update(ctx, id, func(s *Session) error { s.Stats.Requests++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := TakeSnapshot(ctx, st, "a", ReasonManual); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(5 * time.Hour)
	n, err := Collect(ctx, st, Retention{TTL: 3*time.Hour + time.Minute}, now) // a (5h) and b (4h) idle too long
	if err != nil || n != 2 {
		t.Fatalf("TTL: deleted %d, %v; want 2", n, err)
	}
	for id, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true} {
		_, err := st.Get(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("after TTL: %s kept %v, want %v (%v)", id, got, want, err)
		}
	}
	if list, err := st.ListSnapshots(ctx, "a"); err == nil && len(list) > 0 {
		t.Errorf("a's snapshots outlived it: %v", list)
	}
	n, err = Collect(ctx, st, Retention{MaxSessions: 2}, now) // c goes
	if err != nil || n != 1 {
		t.Fatalf("cap: deleted %d, %v; want 1", n, err)
	}
	if _, err := st.Get(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("c survived the cap: %v", err)
	}
	if n, _ := Collect(ctx, st, Retention{}, now); n != 0 {
		t.Errorf("zero retention deleted %d", n)
	}
}

// TestCollectMaxBytes: once the sessions updated last take max_bytes,
// every older one goes, oldest first, with its snapshots.
func TestCollectMaxBytes(t *testing.T) {
	logStores(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		ctx := context.Background()
		for _, id := range []string{"a", "b", "c", "d"} { // a oldest, d newest
			mustUpdate(t, st, id, func(s *Session) { s.Messages = conversation(20, 500, id) })
		}
		if _, err := TakeSnapshot(ctx, st, "b", ReasonManual); err != nil {
			t.Fatal(err)
		}
		list, err := st.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		size := map[string]int64{}
		for _, info := range list {
			if info.Bytes <= 0 {
				t.Fatalf("List gives %s no size: %+v", info.SessionID, info)
			}
			size[info.SessionID] = info.Bytes
		}
		if size["b"] <= size["a"] {
			t.Errorf("b's snapshot is not counted: a %d bytes, b %d", size["a"], size["b"])
		}
		// Room for d and c, not for b: b goes, and a, older, with it.
		limit := size["d"] + size["c"] + size["b"]/2
		n, err := Collect(ctx, st, Retention{MaxBytes: limit}, t0)
		if err != nil || n != 2 {
			t.Fatalf("deleted %d, %v; want 2", n, err)
		}
		for id, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true} {
			if _, err := st.Get(ctx, id); (err == nil) != want {
				t.Errorf("%s kept %v, want %v (%v)", id, err == nil, want, err)
			}
		}
		if list, _ := st.ListSnapshots(ctx, "b"); len(list) != 0 {
			t.Errorf("b's snapshots outlived it: %v", list)
		}
		if n, _ := Collect(ctx, st, Retention{MaxBytes: limit}, t0); n != 0 {
			t.Errorf("a second collection under the cap deleted %d", n)
		}
	})
}

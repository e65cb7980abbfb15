package rewrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// claimStore is a memStore with claims, as replicas sharing one store
// have them. While elsewhere is set, every claim is held by another
// replica; claimErr makes every claim fail.
type claimStore struct {
	*memStore
	mu        sync.Mutex
	held      map[string]string // key → token
	elsewhere bool
	claimErr  error
	empty     bool // grant every claim with no token (a store of one process)
	ttls      []time.Duration
	claims    int
	released  []string // keys, in order
	unstored  []string // keys released before their summary was stored
	next      int
}

func newClaimStore() *claimStore {
	return &claimStore{memStore: &memStore{}, held: make(map[string]string)}
}

func (s *claimStore) ClaimSummary(_ context.Context, session, key string, ttl time.Duration) (func(context.Context) error, bool, error) {
	tok, ok, err := s.claim(session, key, ttl)
	if !ok || err != nil || tok == "" {
		return nil, ok, err
	}
	return func(ctx context.Context) error { return s.release(ctx, session, key, tok) }, true, nil
}

func (s *claimStore) claim(session, key string, ttl time.Duration) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	s.ttls = append(s.ttls, ttl)
	switch {
	case s.claimErr != nil:
		return "", false, s.claimErr
	case s.empty:
		return "", true, nil
	case s.elsewhere:
		return "", false, nil
	}
	if _, ok := s.held[session+"/"+key]; ok {
		return "", false, nil
	}
	s.next++
	tok := fmt.Sprint("token-", s.next)
	s.held[session+"/"+key] = tok
	return tok, true, nil
}

func (s *claimStore) release(ctx context.Context, session, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[session+"/"+key] != token {
		return errors.New("not the holder")
	}
	delete(s.held, session+"/"+key)
	s.released = append(s.released, key)
	stored, _ := s.memStore.Get(ctx, session)
	if !containsKey(stored, key) {
		s.unstored = append(s.unstored, key)
	}
	return nil
}

func (s *claimStore) set(fn func(s *claimStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *claimStore) heldCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

func containsKey(ss []Summary, key string) bool {
	for _, s := range ss {
		if s.Key == key {
			return true
		}
	}
	return false
}

// waitUntil polls cond until it holds; the deadline only bounds a hung
// test.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestClaimEachSummary: with a store that has claims, each batch is
// claimed for summarize.timeout plus a margin before its call, and
// released by its holder once its summary is stored.
func TestClaimEachSummary(t *testing.T) {
	store := newClaimStore()
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{Timeout: 5 * time.Second}, f, CompactorOptions{Store: store})
	got, err := c.Compact(t.Context(), session("s"), turns(10, hundred), counter)
	if err != nil || got.Summaries != 7 || f.count() != 7 {
		t.Fatalf("%v: %d summaries, %d calls; want 7 and 7", err, got.Summaries, f.count())
	}
	if store.claims != 7 || len(store.released) != 7 || store.heldCount() != 0 {
		t.Errorf("%d claims, %d released, %d still held; want 7, 7, 0", store.claims, len(store.released), store.heldCount())
	}
	if len(store.unstored) > 0 {
		t.Errorf("claims released before their summary was stored: %q", store.unstored)
	}
	for _, ttl := range store.ttls {
		if ttl != 5*time.Second+claimMargin {
			t.Errorf("claimed for %v, want %v", ttl, 5*time.Second+claimMargin)
		}
	}
	if st := c.Stats(); st.Deferred != 0 || st.StoreErrors != 0 {
		t.Errorf("Deferred %d, StoreErrors %d; want 0", st.Deferred, st.StoreErrors)
	}
}

// TestClaimHeldElsewhere: while another replica holds the claim, the job
// calls nothing and folds the summaries that replica stores.
func TestClaimHeldElsewhere(t *testing.T) {
	store := newClaimStore()
	store.elsewhere = true
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	msgs := turns(10, hundred)
	done := make(chan Compaction, 1)
	go func() {
		got, err := c.Compact(t.Context(), session("s"), msgs, counter)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	waitUntil(t, "the job to find the claim held", func() bool { return c.Stats().Deferred == 1 })

	// The other replica writes the summaries into the shared store.
	other := &fakeSummarizer{}
	c2, _ := newCompactor(t, SummarizeConfig{}, other, CompactorOptions{Store: store.memStore})
	want, err := c2.Compact(t.Context(), session("s"), msgs, counter)
	if err != nil {
		t.Fatal(err)
	}
	got := <-done
	if f.count() != 0 || other.count() != 7 {
		t.Errorf("calls: %d here, %d on the other replica; want 0 and 7", f.count(), other.count())
	}
	if got.Summaries != 7 || blockOf(got.Messages) != blockOf(want.Messages) {
		t.Errorf("folded %d summaries, %q; want the other replica's %q", got.Summaries, blockOf(got.Messages), blockOf(want.Messages))
	}
}

// TestClaimExpires: a claim whose holder never writes (it died) stops
// holding the job back once it expires: the job claims and writes.
func TestClaimExpires(t *testing.T) {
	store := newClaimStore()
	store.elsewhere = true
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	done := make(chan Compaction, 1)
	go func() {
		got, _ := c.Compact(t.Context(), session("s"), turns(10, hundred), counter)
		done <- got
	}()
	waitUntil(t, "the job to find the claim held", func() bool { return c.Stats().Deferred == 1 })
	if f.count() != 0 {
		t.Fatalf("%d calls while another replica held the claim", f.count())
	}
	store.set(func(s *claimStore) { s.elsewhere = false }) // its time to live passed
	if got := <-done; got.Summaries != 7 || f.count() != 7 {
		t.Errorf("%d summaries, %d calls after the claim expired; want 7 and 7", got.Summaries, f.count())
	}
}

// TestClaimFailureWritesAnyway: a store whose claims fail (Redis down)
// does not stop summaries; the failure is counted and logged once a job.
func TestClaimFailureWritesAnyway(t *testing.T) {
	store := newClaimStore()
	store.claimErr = errors.New("redis: connection refused")
	var logs syncBuffer
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	got, err := c.Compact(t.Context(), session("s"), turns(10, hundred), counter)
	if err != nil || got.Summaries != 7 || f.count() != 7 {
		t.Fatalf("%v: %d summaries, %d calls; want 7 and 7", err, got.Summaries, f.count())
	}
	if st := c.Stats(); st.StoreErrors != 7 {
		t.Errorf("StoreErrors = %d, want 7 (one a claim)", st.StoreErrors)
	}
	if n := strings.Count(logs.String(), "claiming a summary failed"); n != 1 {
		t.Errorf("the failed claims were logged %d times in one job, want once:\n%s", n, logs.String())
	}
}

// TestClaimLeftToExpireOnFailure: a summarizer that fails leaves its
// claim to expire, so that the other replicas do not all try at once.
func TestClaimLeftToExpireOnFailure(t *testing.T) {
	store := newClaimStore()
	f := &fakeSummarizer{reply: func(context.Context, SummaryRequest) (string, error) {
		return "", errors.New("backend down")
	}}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	if _, err := c.Compact(t.Context(), session("s"), turns(10, hundred), counter); err == nil {
		t.Fatal("no error from a failing summarizer")
	}
	if store.heldCount() != 1 || len(store.released) != 0 {
		t.Errorf("%d claims held, %d released; want 1 and 0", store.heldCount(), len(store.released))
	}
}

// TestClaimWithoutToken: a store that grants claims with no token (one
// process) is used as a store without claims: no release, no second read.
func TestClaimWithoutToken(t *testing.T) {
	store := newClaimStore()
	store.empty = true
	f := &fakeSummarizer{}
	c, _ := newCompactor(t, SummarizeConfig{}, f, CompactorOptions{Store: store})
	if got, err := c.Compact(t.Context(), session("s"), turns(10, hundred), counter); err != nil || got.Summaries != 7 {
		t.Fatalf("%v, %d summaries", err, got.Summaries)
	}
	if n := store.gets.Load(); n != 1 || len(store.released) != 0 || f.count() != 7 {
		t.Errorf("%d reads, %d releases, %d calls; want 1, 0, 7", n, len(store.released), f.count())
	}
}

// syncBuffer is a bytes.Buffer for a log written from background jobs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

package main

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds and fails the test, saying what it
// waited for, when it does not within 10 seconds. The pause between polls
// only keeps the loop from spinning; no test relies on its length.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

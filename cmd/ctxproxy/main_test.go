package main

import (
	"os"
	"testing"
)

// TestMain lets a test run the program itself in a child process (a
// terminal's, for the chat): with CTXPROXYTEST_MAIN=1 the test binary is
// ctxproxy, its arguments ctxproxy's.
func TestMain(m *testing.M) {
	if os.Getenv("CTXPROXYTEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Package redistest runs throwaway redis-server processes for ctxproxy's
// tests of the Redis store and of replicas sharing it. Without
// redis-server a test is skipped, except under CI (the CI environment
// variable set), which must run it: .ci/run installs it.
package redistest

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary returns the redis-server binary, or skips the test (fails it
// under CI) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server is not installed; CI must run the Redis store tests")
		}
		t.Skip("redis-server is not installed")
	}
	return bin
}

// Start starts a redis-server on a free loopback port and returns its
// address; it stops when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	return StartOn(t, Binary(t), FreePort(t))
}

// FreePort returns a loopback port free at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartOn runs redis-server (bin) on port, without persistence, until the
// test ends, and returns its address once it answers.
func StartOn(t testing.TB, bin string, port int) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; ; i++ {
		if rdb.Ping(context.Background()).Err() == nil {
			return addr
		}
		if i == 500 {
			t.Fatalf("redis-server did not answer on %s:\n%s", addr, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

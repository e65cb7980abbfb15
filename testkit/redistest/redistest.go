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
	"path/filepath"
	"strconv"
	"strings"
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
	return StartServer(t).Addr
}

// Server is a running redis-server.
type Server struct {
	Addr string
	cmd  *exec.Cmd
}

// StartServer starts a redis-server on a free loopback port, without
// persistence, with args added to its command line (e.g. "--replicaof",
// "127.0.0.1", "6379"); it stops when the test ends, or at Kill.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	port := FreePort(t)
	addr, cmd := start(t, Binary(t), port, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args...)...)
	return &Server{Addr: addr, cmd: cmd}
}

// StartSentinel starts a Redis Sentinel on a free loopback port that
// monitors the primary at addr under the name master, with a quorum of one
// and a primary counted as down after a second; it returns the sentinel's
// address.
func StartSentinel(t testing.TB, master, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	own := FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	text := "port " + strconv.Itoa(own) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
		"sentinel monitor " + master + " " + host + " " + port + " 1\n" +
		"sentinel down-after-milliseconds " + master + " 1000\n" +
		"sentinel failover-timeout " + master + " 5000\n"
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _ = start(t, Binary(t), own, conf, "--sentinel")
	return addr
}

// StartCluster starts a Redis Cluster of three primaries without
// replicas on free loopback ports, each holding a third of the hash
// slots, and returns their addresses once every node reports the cluster
// ok; it stops when the test ends. It needs redis-cli too (it comes with
// redis-server) and is skipped without it, except under CI.
func StartCluster(t testing.TB) []string {
	t.Helper()
	bin := Binary(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-cli is not installed; CI must run the Redis Cluster tests")
		}
		t.Skip("redis-cli is not installed")
	}
	dir := t.TempDir()
	addrs := make([]string, 3)
	for i := range addrs {
		port, bus := FreePort(t), FreePort(t)
		p := strconv.Itoa(port)
		addrs[i], _ = start(t, bin, port, "--port", p, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--cluster-port", strconv.Itoa(bus), "--save", "", "--appendonly", "no", "--dir", dir)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		for i := 0; ; i++ {
			info, _ := rdb.ClusterInfo(context.Background()).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			if i == 1000 {
				rdb.Close()
				t.Fatalf("the cluster is not ok on %s after 10s:\n%s", addr, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
		rdb.Close()
	}
	return addrs
}

// Kill stops the server at once, as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
	}
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
	addr, _ := start(t, bin, port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	return addr
}

// start runs bin with args until the test ends, and returns the address
// of port once it answers PING, and the process.
func start(t testing.TB, bin string, port int, args ...string) (string, *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
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
			return addr, cmd
		}
		if i == 500 {
			t.Fatalf("%s did not answer on %s:\n%s", bin, addr, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Package redistest runs throwaway redis-server processes for ctxproxy's
// tests of the Redis store and of replicas sharing it. Without
// redis-server a test is skipped, except under CI (the CI environment
// variable set), which must run it: .ci/run installs it.
package redistest

import (
	"bytes"
	"context"
	"fmt"
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
	bin, dir := Binary(t), t.TempDir()
	addr, cmd := startFree(t, bin, func(port int) []string {
		return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir}, args...)
	})
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
	conf := filepath.Join(dir, "sentinel.conf")
	addr, _ = startFree(t, Binary(t), func(own int) []string {
		text := "port " + strconv.Itoa(own) + "\nbind 127.0.0.1\ndir " + dir + "\n" +
			"sentinel monitor " + master + " " + host + " " + port + " 1\n" +
			"sentinel down-after-milliseconds " + master + " 1000\n" +
			"sentinel failover-timeout " + master + " 5000\n"
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	})
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
		addrs[i], _ = startFree(t, bin, func(port int) []string {
			p := strconv.Itoa(port)
			return []string{"--port", p, "--bind", "127.0.0.1",
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
				"--cluster-port", strconv.Itoa(FreePort(t)), "--save", "", "--appendonly", "no", "--dir", dir}
		})
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
	addr, _, err := start(t, bin, port, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startFree runs bin with args(port) on a port free at the time, and
// tries again on another port when that one was taken before the server
// bound it (tests of other packages start servers at the same time).
func startFree(t testing.TB, bin string, args func(port int) []string) (string, *exec.Cmd) {
	t.Helper()
	for try := 1; ; try++ {
		port := FreePort(t)
		addr, cmd, err := start(t, bin, port, args(port)...)
		if err == nil {
			return addr, cmd
		}
		if try == 5 {
			t.Fatal(err)
		}
	}
}

// start runs bin with args until the test ends, and returns the address
// of port once the process itself answers PING there (not another server
// that took the port first), and the process.
func start(t testing.TB, bin string, port int, args ...string) (string, *exec.Cmd, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() { cmd.Process.Kill(); <-exited }
	t.Cleanup(stop)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	pid := "process_id:" + strconv.Itoa(cmd.Process.Pid) + "\r\n"
	for i := 0; ; i++ {
		select {
		case <-exited:
			return "", nil, fmt.Errorf("%s on %s exited:\n%s", bin, addr, out.String())
		default:
		}
		if info, err := rdb.Info(context.Background(), "server").Result(); err == nil {
			if strings.Contains(info, pid) {
				return addr, cmd, nil
			}
			stop()
			return "", nil, fmt.Errorf("another server answers on %s", addr)
		}
		if i == 500 {
			stop()
			return "", nil, fmt.Errorf("%s did not answer on %s:\n%s", bin, addr, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

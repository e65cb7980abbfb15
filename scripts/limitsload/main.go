// Command limitsload drives a running ctxproxy with what its limits exist
// for: many large chat bodies at once, and many clients that send their
// bodies a byte at a time. It reports what each got; scripts/limits.sh
// runs it against the built binary and reads the proxy's peak memory.
// Loopback only; every phase is bounded in time.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	proxy := flag.String("proxy", "http://127.0.0.1:11591", "ctxproxy's URL (loopback)")
	bodies := flag.Int("bodies", 64, "large chat requests sent at once")
	size := flag.Int("size", 30, "size of each large body, in MB")
	slow := flag.Int("slow", 2000, "clients sending their body one byte every 2 s")
	hold := flag.Duration("hold", 30*time.Second, "how long the slow clients keep trying")
	flag.Parse()
	u, err := url.Parse(*proxy)
	if err != nil || !isLoopback(u.Hostname()) {
		log.Fatalf("limitsload: -proxy must be a loopback URL, got %q", *proxy)
	}

	// Phase 1: large bodies at once.
	big := chatBody(*size << 20)
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	client := &http.Client{Timeout: 5 * time.Minute}
	var retryAfter atomic.Int64 // the last Retry-After, in seconds
	send := func() string {
		resp, err := client.Post(*proxy+"/api/chat", "application/json", bytes.NewReader(big))
		if err != nil {
			return "error"
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || n <= 0 {
				return "503 without Retry-After"
			}
			retryAfter.Store(int64(n))
		}
		return fmt.Sprint(resp.StatusCode)
	}
	refused := 0
	for range *bodies {
		wg.Go(func() {
			key := send()
			mu.Lock()
			statuses[key]++
			mu.Unlock()
		})
	}
	wg.Wait()
	refused = statuses["503"]
	fmt.Printf("large bodies: %d × %d MB at once in %s: %v\n", *bodies, *size, time.Since(start).Round(time.Millisecond), statuses)
	// A refusal says "try again after Retry-After": each refused request,
	// sent again as a client that honours it does (a few times at most),
	// must be served.
	retried := map[string]int{}
	for range refused {
		got := send()
		for try := 1; got == "503" && try < 10; try++ {
			time.Sleep(time.Duration(retryAfter.Load()) * time.Second)
			got = send()
		}
		retried[got]++
	}
	if refused > 0 {
		fmt.Printf("refused bodies sent again one at a time: %v\n", retried)
	}

	// Phase 2: slow bodies.
	var open, cut atomic.Int64
	deadline := time.Now().Add(*hold)
	var swg sync.WaitGroup
	for range *slow {
		swg.Go(func() {
			conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err != nil {
				cut.Add(1)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
			open.Add(1)
			defer open.Add(-1)
			for time.Now().Before(deadline) {
				conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Write([]byte(" ")); err != nil {
					cut.Add(1)
					return
				}
				conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
					cut.Add(1) // the server answered or closed: not held any more
					return
				}
			}
		})
	}
	time.Sleep(min(*hold, 30*time.Second))
	fmt.Printf("slow bodies: %d clients at a byte every 2 s: after %s, %d still held, %d cut off\n",
		*slow, min(*hold, 30*time.Second), open.Load(), cut.Load())
	held := open.Load()
	swg.Wait()
	// What a limit may answer is a 200 or a 503 with Retry-After; a
	// connection error would mean the proxy fell over.
	failed := false
	for k := range statuses {
		if k != "200" && k != "503" {
			failed = true
		}
	}
	if failed || held > 0 || statuses["200"] == 0 || retried["200"] != refused {
		fmt.Println("FAIL: a large body failed otherwise than with 503, none was served, a refused one failed again, or slow clients were still held")
		os.Exit(1)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// chatBody is an Ollama chat request of about n bytes.
func chatBody(n int) []byte {
	b, _ := json.Marshal(map[string]any{"model": "llama3.1:8b", "stream": false, "messages": []any{
		map[string]any{"role": "user", "content": strings.Repeat("word ", n/5)},
	}})
	return b
}

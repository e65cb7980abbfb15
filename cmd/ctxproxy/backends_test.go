package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/testkit/fakebackend"
)

// Two servers behind one ctxproxy, the second's memory read from the
// ctxproxy on its machine (with its admin token): the status lists
// both, with where each one's memory is read and the reading, and
// `ctxproxy gpu` shows them.
func TestSeveralBackendsStatusAndGPU(t *testing.T) {
	be1 := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	be2 := fakebackend.New(t, fakebackend.Ollama, fakebackend.Options{})
	env := func() map[string]string { return map[string]string{"CTXPROXY_GPU_PROBE": "cpu"} }
	// The ctxproxy on gpu2's machine, in front of its server.
	there, _, stopThere := startServe(t, []string{"--backend", be2.URL}, func() map[string]string {
		e := env()
		e["CTXPROXY_ADMIN_TOKEN"] = "t0ken"
		return e
	}())
	defer stopThere()

	cfg := filepath.Join(t.TempDir(), "ctxproxy.yaml")
	yaml := fmt.Sprintf("backends:\n  - name: gpu1\n    url: %s\n  - name: gpu2\n    url: %s\n    memory: http://%s\n    memory_token: t0ken\n",
		be1.URL, be2.URL, there)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, logs, stop := startServe(t, []string{"--config", cfg}, env())
	defer stop()

	// gpu2's memory is read on the first request that needs it; the
	// status shows a reading once there is one.
	remote, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/chat",
		strings.NewReader(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
	remote.Header.Set("Content-Type", "application/json")
	var st adminapi.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		st = status(t, addr)
		if len(st.Backends) == 2 && st.Backends[1].GPU != nil || time.Now().After(deadline) {
			break
		}
		if resp, err := http.DefaultClient.Do(remote.Clone(context.Background())); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(st.Backends) != 2 {
		t.Fatalf("status backends: %+v\n%s", st.Backends, logs)
	}
	g1, g2 := st.Backends[0], st.Backends[1]
	if g1.Name != "gpu1" || g1.Memory != "local" || g1.GPU == nil || g1.GPU.Probe != "cpu" {
		t.Errorf("gpu1: %+v", g1)
	}
	if g2.Name != "gpu2" || g2.Memory != "ctxproxy at http://"+there || g2.GPU == nil || g2.GPU.Probe != "cpu" || g2.GPU.Total == 0 {
		t.Errorf("gpu2: %+v (%+v)", g2, g2.GPU)
	}

	var out bytes.Buffer
	if err := run(context.Background(), []string{"gpu", "--proxy", "http://" + addr}, envOf(nil), nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"backends\n", "NAME", "gpu1  up", "local", "gpu2  up", "ctxproxy at http://" + there} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ctxproxy gpu lacks %q:\n%s", want, out.String())
		}
	}
}

func status(t *testing.T, addr string) adminapi.Status {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/ctxproxy/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminapi.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

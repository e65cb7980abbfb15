package proxy

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/headless"
)

// With several servers behind ctxproxy the page shows a Backends table:
// each server's state, load, models and where its memory is read; with
// one, the table is not shown.
func TestStatusPageBackends(t *testing.T) {
	headless.Require(t)
	fa, base := startFakeStatus(t, "tok")
	page := base + "/ctxproxy/#" + url.Values{"token": {"tok"}}.Encode()
	dom, err := headless.DumpDOM(context.Background(), page, headless.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, `<section id="backends-panel" class="panel" aria-labelledby="backends-title" hidden="">`) {
		t.Error("the Backends table is shown for one backend")
	}

	gib := uint64(1 << 30)
	fa.mu.Lock()
	fa.backends = []map[string]any{
		{"name": "gpu1", "url": "http://10.0.0.1:11434", "kind": "ollama", "version": "0.12.3", "up": true,
			"inflight": 3, "served": 1200, "memory": "local", "models_listed": 7, "models_loaded": 2,
			"gpu": map[string]any{"probe": "nvidia", "level": "ok", "total": 24 * gib, "used": 20 * gib, "free": 4 * gib}},
		{"name": "gpu2", "url": "http://10.0.0.2:11434", "kind": "ollama", "up": false,
			"down_until": time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339), "last_error": "<b>connection refused</b>",
			"inflight": 0, "served": 17, "memory": "ctxproxy at http://10.0.0.2:11435", "models_listed": 3, "models_loaded": 0},
	}
	fa.mu.Unlock()
	if dom, err = headless.DumpDOM(context.Background(), page, headless.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, `<section id="backends-panel" class="panel" aria-labelledby="backends-title">`) {
		t.Error("the Backends table is not shown for two")
	}
	for _, want := range []string{
		"gpu1", "http://10.0.0.1:11434", "ollama 0.12.3", ">up<", "1,200", "7 (2)", ">local<", "4.0 GiB / 24.0 GiB",
		"gpu2", ">down until ", "&lt;b&gt;connection refused&lt;/b&gt;", "ctxproxy at http://10.0.0.2:11435", "3 (0)",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if strings.Contains(dom, "<b>connection") {
		t.Error("a server's error was turned into HTML")
	}
}

package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

// TestBudgetAllocation: each counted request says how its window was
// divided (its budget) in X-Ctxproxy-Budget, its parts
// add up to the window and to the tokens forwarded, and the session's
// stats keep the last one.
func TestBudgetAllocation(t *testing.T) {
	e := newAdminEnv(t, "")
	body, _ := json.Marshal(map[string]any{"model": tinyModel, "stream": false, "messages": []any{
		map[string]string{"role": "system", "content": strings.Repeat("You are terse. ", 20)},
		map[string]string{"role": "user", "content": "hello there"}}})
	resp := post(t, e.ts.URL+"/api/chat", body, map[string]string{"X-Session-ID": "alloc"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var total, system, tools, template, reserve, conv, avail int
	if _, err := fmt.Sscanf(resp.Header.Get("X-Ctxproxy-Budget"), "total=%d system=%d tools=%d template=%d reserve=%d conversation=%d available=%d",
		&total, &system, &tools, &template, &reserve, &conv, &avail); err != nil {
		t.Fatalf("X-Ctxproxy-Budget %q: %v", resp.Header.Get("X-Ctxproxy-Budget"), err)
	}
	sent, _ := strconv.Atoi(resp.Header.Get("X-Ctxproxy-Tokens"))
	if system == 0 || tools != 0 || template == 0 || system+template+conv != sent || system+template+reserve+conv+avail != total ||
		total != 2000 || reserve != 100 {
		t.Errorf("budget total %d = system %d + tools %d + template %d + reserve %d + conversation %d + available %d; %d tokens sent (no tools)",
			total, system, tools, template, reserve, conv, avail, sent)
	}
	if err := e.writer.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := e.json("GET", sessionPath("alloc"), nil, 200)["stats"].(map[string]any)
	b, ok := st["budget"].(map[string]any)
	if !ok || int(b["system"].(float64)) != system || int(b["available"].(float64)) != avail {
		t.Errorf("stats budget %v, header system %d available %d", st["budget"], system, avail)
	}
}

package repl

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ctxproxy/ctxproxy/snapshots"
	"github.com/ctxproxy/ctxproxy/testkit/proxytest"
)

// TestChatScriptedSession drives every chat command through piped stdin
// against the real server and compares the output with golden files.
func TestChatScriptedSession(t *testing.T) {
	p := start(t, proxytest.Options{})
	p.SeedSnapshot(t, snapshots.Snapshot{ID: "earlier", SessionID: "s1", Model: "llama3.1", Tokens: 6, Messages: []snapshots.Message{
		{Role: "user", Content: "We use Go."}, {Role: "assistant", Content: "Noted."}}})
	dir := t.TempDir()
	file := filepath.Join(dir, "context.json")
	out := runChat(t, p, chatRun{session: "s1", model: "llama3.1"}, lines(
		"Hello there",
		"/stats",
		"/save",
		"/context",
		"/context list",
		"/context snapshot",
		"/context restore earlier",
		"/context size 4096",
		"/context auto",
		"Tell me more",
		"/context compress",
		"/context stats",
		"/export "+file,
		"/clear",
		"/import "+file,
		"/context clear",
		"/model",
		"/model llama3.2",
		"/model llama3.1:8b",
		"/help",
		"/nonsense",
		"/context nonsense",
		"/export",
		"//slash at the start",
		"/quit",
		"this line is never sent",
	))
	ids := map[string]string{}
	golden(t, "chat/scripted.stdout", stable(out.stdout, ids, dir, "$DIR"))
	golden(t, "chat/scripted.stderr", stable(out.stderr, ids, p.URL, "$PROXY"))

	var sent []string
	for _, r := range backendChats(p) {
		msgs := roles(r.Body)
		sent = append(sent, msgs[len(msgs)-1])
	}
	want := []string{"user: Hello there", "user: Tell me more", "user: /slash at the start"}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("turns sent (-want +got):\n%s", diff)
	}
	if strings.Contains(out.both, "never sent") {
		t.Errorf("a line after /quit was read:\n%s", out.both)
	}
}

package adminapi

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAnswerHeaders(t *testing.T) {
	h := http.Header{}
	h.Set("X-Ctxproxy-Session", "s1")
	h.Set("X-Ctxproxy-Tokens", "3456")
	h.Set("X-Ctxproxy-Tokens-Before", "9000")
	h.Set("X-Ctxproxy-Limit", "8192")
	h.Set("X-Ctxproxy-Usage", "42.2")
	h.Set("X-Ctxproxy-Dropped", "8")
	h.Set("X-Ctxproxy-Summarized", "0")
	h.Set("X-Ctxproxy-Num-Ctx", "8192")
	h.Add("X-Ctxproxy-Warning", "Context at 90% capacity. Auto-trimming soon.")
	h.Add("X-Ctxproxy-Notice", "Context trimmed. Kept first 2 and last 10 messages.")
	got := ParseHeaders(h)
	want := Headers{Seen: true, Session: "s1", Tokens: 3456, TokensBefore: 9000, Limit: 8192, Usage: 42.2,
		Dropped: 8, NumCtx: 8192, Warnings: []string{"Context at 90% capacity. Auto-trimming soon."},
		Notices: []string{"Context trimmed. Kept first 2 and last 10 messages."}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if ParseHeaders(http.Header{"Content-Type": {"application/json"}}).Seen {
		t.Error("a plain backend's answer counted as ctxproxy's")
	}
}

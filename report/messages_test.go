package report

import (
	"strings"
	"testing"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

func TestMessages(t *testing.T) {
	imp := 0.9
	at := time.Date(2026, 2, 1, 9, 0, 5, 0, time.UTC)
	var b strings.Builder
	err := Messages(&b, Printer{}, []adminapi.SessionMessage{
		{Role: "system", Content: "Be brief.", Timestamp: at, Importance: &imp, Preserve: true},
		{Role: "user", Content: "two\nlines\x1b[31m and  spaces", Timestamp: at},
		{Role: "assistant", Content: strings.Repeat("é", 150), Timestamp: at},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "#  Time                 Role       Importance  Content\n" +
		"1  2026-02-01 09:00:05  system     0.9*        Be brief.\n" +
		"2  2026-02-01 09:00:05  user       -           two lines?[31m and spaces\n" +
		"3  2026-02-01 09:00:05  assistant  -           " + strings.Repeat("é", 100) + "… (150 chars)\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	b.Reset()
	if err := Messages(&b, Printer{}, nil); err != nil || b.String() != "No messages.\n" {
		t.Errorf("empty: %q %v", b.String(), err)
	}
}

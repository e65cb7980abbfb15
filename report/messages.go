package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// messageWidth is how much of a message's content a line of Messages
// shows.
const messageWidth = 100

// Messages is the conversation part of "ctxproxy context show": one line
// per stored message, numbered from 1, with its time, role, importance
// (0..1, "-" when unset; a "*" after it when pinned with _preserve)
// and the start of its content on one line.
func Messages(w io.Writer, p Printer, msgs []adminapi.SessionMessage) error {
	if len(msgs) == 0 {
		_, err := fmt.Fprintln(w, "No messages.")
		return err
	}
	tw := table(w)
	fmt.Fprintf(tw, "#\tTime\tRole\tImportance\tContent\n")
	for i, m := range msgs {
		imp := "-"
		if m.Importance != nil {
			imp = strconv.FormatFloat(*m.Importance, 'f', -1, 64)
		}
		if m.Preserve {
			imp += "*"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, p.When(m.Timestamp), Clean(m.Role), imp, oneLine(m.Content, messageWidth))
	}
	return tw.Flush()
}

// oneLine writes s on one line, its whitespace runs as one space, cut to
// at most width runes with "…" and the length of the whole.
func oneLine(s string, width int) string {
	s = Clean(strings.Join(strings.Fields(s), " "))
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	n := utf8.RuneCountInString(s)
	r := []rune(s)[:width]
	return string(r) + fmt.Sprintf("… (%s chars)", Grouped(n))
}

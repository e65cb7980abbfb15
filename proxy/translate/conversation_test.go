package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/rewrite"
	"github.com/google/go-cmp/cmp"
)

// view is what a test compares of a decoded message.
type view struct {
	Role, Content, ToolCallID string
	Calls                     []string
	Images                    int
	Preserve                  bool
}

func views(msgs []chat.Message) []view {
	out := make([]view, len(msgs))
	for i, m := range msgs {
		out[i] = view{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID, Images: len(m.Images), Preserve: m.Preserve}
		for _, c := range m.ToolCalls {
			out[i].Calls = append(out[i].Calls, c.ID+" "+c.Name+" "+c.Arguments)
		}
	}
	return out
}

// unitsOf lists each unit's message indexes.
func unitsOf(msgs []chat.Message) [][]int {
	var out [][]int
	for _, u := range rewrite.Units(msgs) {
		out = append(out, u.Messages)
	}
	return out
}

func TestDecodeResponsesItems(t *testing.T) {
	body := read(t, filepath.Join("testdata", "responses", "request", "items_tools.json"))
	c, err := DecodeResponses(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []view{
		{Role: "system", Content: "You call tools."},
		{Role: "developer", Content: "Prefer metric units."},
		{Role: "user", Content: "Weather in Paris\nand Köln?", Images: 1},
		{Role: "assistant", Content: "Checking."}, // with the reasoning item before it
		{Role: "assistant", Calls: []string{`call_1 get_weather {"city":"Paris"}`}},
		{Role: "assistant", Calls: []string{"call_2 get_weather "}},
		{Role: "tool", Content: `{"temp":21}`, ToolCallID: "call_1"},
		{Role: "tool", Content: `{"temp":12}`, ToolCallID: "call_2"},
		{Role: "user", Content: "Thanks. Which is warmer?"},
	}
	if diff := cmp.Diff(want, views(c.Messages)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	// Each call is kept or dropped with its output.
	if diff := cmp.Diff([][]int{{0}, {1}, {2}, {3}, {4, 6}, {5, 7}, {8}}, unitsOf(c.Messages)); diff != "" {
		t.Errorf("units (-want +got):\n%s", diff)
	}
	if c.Model != "qwen3" || !c.Stream || c.MaxOutput != 300 || c.FirstUser != "Weather in Paris\nand Köln?" || c.FirstSystem != "You call tools." {
		t.Errorf("model %q stream %v max %d first user %q system %q", c.Model, c.Stream, c.MaxOutput, c.FirstUser, c.FirstSystem)
	}
	if !strings.Contains(string(c.Tools), `"function":{"name":"get_weather"`) || strings.Contains(string(c.Tools), "web_search") {
		t.Errorf("tools for counting = %s", c.Tools)
	}
	if !bytes.HasPrefix(c.Messages[3].Raw, []byte(`[{"type":"reasoning"`)) {
		t.Errorf("the reasoning item is not grouped with the message after it: %s", c.Messages[3].Raw)
	}

	// Drop the first call's unit, as a strategy would, and add a marker.
	kept := []chat.Message{c.Messages[0], c.Messages[1], c.Messages[2], c.Messages[3],
		{Role: "user", Content: "[2 messages omitted]", Synthetic: true}, c.Messages[5], c.Messages[7], c.Messages[8]}
	out, err := c.Encode(kept)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeResponses(out)
	if err != nil {
		t.Fatalf("the encoded body does not decode: %v\n%s", err, out)
	}
	if diff := cmp.Diff(views(kept), views(again.Messages)); diff != "" {
		t.Errorf("after Encode (-want +got):\n%s", diff)
	}
	sameOutside(t, body, out, "input")
	if _, _, err := ResponsesRequest(out, RequestOptions{}); err != nil {
		t.Errorf("the trimmed request does not translate: %v", err)
	}
}

// sameOutside checks that every top-level member but except has the
// same bytes in a and b.
func sameOutside(t *testing.T, a, b []byte, except ...string) {
	t.Helper()
	fa, fb := fields(a), fields(b)
	for _, k := range except {
		delete(fa, k)
		delete(fb, k)
	}
	if len(fa) != len(fb) {
		t.Errorf("members: %d before, %d after", len(fa), len(fb))
	}
	for k, v := range fa {
		if !bytes.Equal(v, fb[k]) {
			t.Errorf("member %s changed:\n%s\n%s", k, v, fb[k])
		}
	}
}

func TestResponsesStringInputUnchanged(t *testing.T) {
	body := read(t, filepath.Join("testdata", "responses", "request", "string_input.json"))
	c, err := DecodeResponses(body)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]view{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello there"}}, views(c.Messages)); diff != "" {
		t.Fatalf("messages (-want +got):\n%s", diff)
	}
	out, err := c.Encode(c.Messages)
	if err != nil || !bytes.Equal(out, body) {
		t.Errorf("an unchanged conversation must encode to the body as sent: %v\n%s", err, out)
	}
	// A summary folded into the instructions is written back there.
	edited := append([]chat.Message(nil), c.Messages...)
	edited[0].Content += "\n\nEarlier: the user said hi."
	edited[0].Edited = true
	out, err = c.Encode(edited)
	if err != nil {
		t.Fatal(err)
	}
	if got := str(fields(out)["instructions"]); got != "Be brief.\n\nEarlier: the user said hi." {
		t.Errorf("instructions = %q", got)
	}
	sameOutside(t, body, out, "instructions")
}

func TestDecodeMessagesToolUnits(t *testing.T) {
	body := read(t, filepath.Join("testdata", "messages", "request", "tools.json"))
	c, err := DecodeMessages(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []view{
		{Role: "system", Content: "You call tools.\nMetric units."},
		{Role: "user", Content: "Weather in Paris and Köln?", Images: 1},
		{Role: "assistant", Content: "Checking.", Calls: []string{`toolu_1 get_weather {"city":"Paris"}`, `toolu_2 get_weather {"city":"Köln"}`}},
		{Role: "tool", Content: "{\"temp\":21}\ntimeout\nWhich is warmer?", ToolCallID: "toolu_1"},
	}
	if diff := cmp.Diff(want, views(c.Messages)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0}, {1}, {2, 3}}, unitsOf(c.Messages)); diff != "" {
		t.Errorf("units (-want +got):\n%s", diff)
	}

	// The shrink strategy cut the middle out of the results.
	edited := append([]chat.Message(nil), c.Messages...)
	edited[3].Content = "{\"temp\":21}[… 3 tokens cut …]"
	edited[3].Edited = true
	out, err := c.Encode(edited)
	if err != nil {
		t.Fatal(err)
	}
	sameOutside(t, body, out, "messages")
	var got struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	wantLast := `[{"type":"tool_result","tool_use_id":"toolu_1","content":"{\"temp\":21}[… 3 tokens cut …]"},{"type":"tool_result","tool_use_id":"toolu_2","content":"","is_error":true}]`
	if string(got.Messages[2].Content) != wantLast {
		t.Errorf("edited results =\n%s\nwant\n%s", got.Messages[2].Content, wantLast)
	}
	if _, _, err := MessagesRequest(out, RequestOptions{}); err != nil {
		t.Errorf("the edited request does not translate: %v", err)
	}
}

func TestMessagesSummaryBecomesSystem(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"a","_preserve":true},{"role":"assistant","content":"b"},{"role":"user","content":"c"}],"x-extra":{"kept":1}}`)
	c, err := DecodeMessages(body)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Annotated || !c.Messages[0].Preserve {
		t.Fatalf("annotations not read: %+v", c.Messages[0])
	}
	msgs := []chat.Message{{Role: "system", Content: "Summary: a, b.", Synthetic: true}, c.Messages[2]}
	out, err := c.Encode(msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"c"}],"x-extra":{"kept":1},"system":"Summary: a, b."}`
	if string(out) != want {
		t.Errorf("Encode =\n%s\nwant\n%s", out, want)
	}
}

func TestDecodeNotConversation(t *testing.T) {
	for _, body := range []string{`[]`, `{"model":1,"input":"x"}`, `{"model":"m","input":3}`, `{"model":"m","input":"x"`} {
		if _, err := DecodeResponses([]byte(body)); !errors.Is(err, ErrNotConversation) {
			t.Errorf("DecodeResponses(%s) = %v, want ErrNotConversation", body, err)
		}
	}
	for _, body := range []string{`{"model":"m"}`, `{"model":"m","messages":[{"content":"x"}]}`} {
		if _, err := DecodeMessages([]byte(body)); !errors.Is(err, ErrNotConversation) {
			t.Errorf("DecodeMessages(%s) = %v, want ErrNotConversation", body, err)
		}
	}
}

// The Responses API's and Anthropic's images (a tool result's too) keep
// their sizes, read from their data.
func TestConversationImageSizes(t *testing.T) {
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAAAAAC4HznGAAAAEklEQVR4nGJiYGAAYUAAAAD//wAgAAWURUErAAAAAElFTkSuQmCC" // 3×2
	want := []chat.Image{{Width: 3, Height: 2}, {}}
	responses := `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},
		{"type":"input_image","image_url":"data:image/png;base64,` + png + `"},{"type":"input_image","image_url":"https://example.com/a.png"}]}]}`
	c, err := DecodeResponses([]byte(responses))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, c.Messages[0].Images); diff != "" {
		t.Errorf("responses: images (-want +got):\n%s", diff)
	}
	messages := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[
		{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}},
		{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}]}`
	if c, err = DecodeMessages([]byte(messages)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, c.Messages[0].Images); diff != "" {
		t.Errorf("messages: images (-want +got):\n%s", diff)
	}
}

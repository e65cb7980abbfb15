//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// The models start.sh creates. Both stop after 16 output tokens of random
// printable text: the tests check plumbing, never answers.
const (
	modelTiny  = "tiny"
	modelTools = "tiny-tools"
)

// chatRequest is an Ollama /api/chat body. Options is left out when empty,
// so ctxproxy, not the test, decides num_ctx.
type chatRequest struct {
	Model    string          `json:"model"`
	Messages []api.Message   `json:"messages"`
	Stream   bool            `json:"stream"`
	Options  map[string]any  `json:"options,omitempty"`
	Tools    json.RawMessage `json:"tools,omitempty"`
}

// chatResult is one /api/chat exchange as the client saw it.
type chatResult struct {
	status int
	header http.Header
	// final is the last response object (the one with "done": true and
	// the metrics); for a stream, the last NDJSON line.
	final api.ChatResponse
	// content is the reply text, joined over a stream's chunks.
	content string
	// chunks counts NDJSON lines (1 when not streaming).
	chunks int
	body   []byte // the raw body when the status is not 200
}

// chat posts req to base+"/api/chat" with the extra headers hdr (name,
// value pairs) and reads the answer, streamed or not. It fails the test on
// a transport error or a status other than 200.
func chat(t *testing.T, base string, req chatRequest, hdr ...string) chatResult {
	t.Helper()
	res := chatRaw(t, base, req, hdr...)
	if res.status != http.StatusOK {
		t.Fatalf("POST %s/api/chat: %d %s", base, res.status, res.body)
	}
	if !res.final.Done {
		t.Fatalf("POST %s/api/chat: the answer never said done (%d chunks)", base, res.chunks)
	}
	return res
}

// chatRaw is chat without the status checks.
func chatRaw(t *testing.T, base string, req chatRequest, hdr ...string) chatResult {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequest(http.MethodPost, base+"/api/chat", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		hr.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(hr)
	if err != nil {
		t.Fatalf("POST %s/api/chat: %v", base, err)
	}
	defer resp.Body.Close()
	res := chatResult{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		res.body, _ = io.ReadAll(resp.Body)
		return res
	}
	var content strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r api.ChatResponse
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("POST %s/api/chat: chunk %d is not a chat response: %v: %s", base, res.chunks, err, sc.Bytes())
		}
		res.chunks++
		content.WriteString(r.Message.Content)
		res.final = r
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("POST %s/api/chat: reading the answer: %v", base, err)
	}
	res.content = content.String()
	return res
}

// headerInt reads an integer X-Ctxproxy-* response header and fails the
// test, naming the missing feature, when it is absent or not a number.
func headerInt(t *testing.T, h http.Header, name string) int {
	t.Helper()
	v := h.Get(name)
	if v == "" {
		t.Fatalf("response has no %s header (is that ctxproxy feature in this build?); headers: %v", name, ctxproxyHeaders(h))
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		t.Fatalf("%s: %q is not an integer", name, v)
	}
	return n
}

// ctxproxyHeaders returns the X-Ctxproxy-* headers, for failure messages.
func ctxproxyHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-ctxproxy-") {
			out[k] = strings.Join(v, ", ")
		}
	}
	return out
}

// relErr is (est − real) / real.
func relErr(est, real int) float64 {
	if real == 0 {
		return 0
	}
	return float64(est-real) / float64(real)
}

// words are common English words: an OpenAI tokenizer counts about one
// token per word, while the models' 276-token byte-level BPE counts nearly
// one token per byte, which is what makes calibration necessary.
var words = strings.Fields(`the of and to in is it that for on with as was at by this be from or have an not are
but we they you one all can her there their what so up out if about who get which go me when make time no just him
know take people into year your good some could them see other than then now look only come its over think also
back after use two how our work first well way even new want because any these give day most us river garden
window number question market morning letter station pocket evening picture machine mountain village`)

// prose returns about n bytes of deterministic text from r.
func prose(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	s := b.String()
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// conversation returns a system message and turns user messages with the
// assistant's answers between them, ending with a user message. Messages
// are 50–110 bytes, so any trimming strategy can cut at fine grain; seed
// makes each conversation different and reproducible.
func conversation(seed uint64, turns int) []api.Message {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	msgs := []api.Message{{Role: "system", Content: fmt.Sprintf("You answer briefly. Conversation %d. %s", seed, prose(r, 60))}}
	for i := range turns {
		if i > 0 {
			msgs = append(msgs, api.Message{Role: "assistant", Content: prose(r, 50+r.IntN(40))})
		}
		msgs = append(msgs, api.Message{Role: "user", Content: fmt.Sprintf("Question %d: %s", i+1, prose(r, 60+r.IntN(50)))})
	}
	return msgs
}

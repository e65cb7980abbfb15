package budget

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"math"
	"runtime"
	"sync"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/parallel"
)

// Prompt structure overhead, as OpenAI's chat format bills it: every
// message is wrapped in <|start|>{role}<|message|>…<|end|>, a name adds
// one token, and the prompt ends with the priming of the reply,
// <|start|>assistant<|message|>.
// Ollama's templates wrap messages the same way with a few tokens more or
// less per message; calibration absorbs the difference.
const (
	perMessage   = 3
	perName      = 1
	replyPriming = 3
	// perToolCall is the structure around one call in an assistant
	// message: Ollama's templates write {"name": …, "arguments": …}.
	perToolCall = 8
	// toolsOverhead is the preamble of a tools section ("# Tools",
	// "namespace functions {", a template's instructions) beyond the
	// definitions themselves.
	toolsOverhead = 12
	// DefaultImageTokens is what one image costs: Ollama represents a CLIP
	// image as 768 embeddings (server/prompt.go).
	DefaultImageTokens = 768
)

// MessageCounter counts chat messages the way backends bill them. It
// implements rewrite.Counter, so strategies measure with it. Counts are
// corrected by the model's calibration when it has one. A MessageCounter
// is safe for concurrent use.
type MessageCounter struct {
	text        tokenizer.Counter
	imageTokens int
	cal         *calibrator // nil: no correction
	// fixed, when set, is the correction this counter uses whatever the
	// calibrator learns meanwhile (see Frozen).
	fixed *Calibration

	toolsSeed  maphash.Seed
	toolCounts *countStore // counts of tools arrays by their raw JSON
}

// NewMessageCounter returns an uncalibrated counter of messages whose text
// is counted by text; imageTokens is the cost of one image (0 means
// DefaultImageTokens). Give it a *Caching so that resent messages are not
// tokenized again.
func NewMessageCounter(text tokenizer.Counter, imageTokens int) *MessageCounter {
	if imageTokens == 0 {
		imageTokens = DefaultImageTokens
	}
	return &MessageCounter{
		text:        text,
		imageTokens: max(0, imageTokens),
		toolsSeed:   maphash.MakeSeed(),
		toolCounts:  newCountStore(256),
	}
}

// Name returns the name of the text encoding.
func (mc *MessageCounter) Name() string { return mc.text.Name() }

// Calibration returns the correction in use (Ratio 1 when none).
func (mc *MessageCounter) Calibration() Calibration {
	if mc.fixed != nil {
		return *mc.fixed
	}
	if mc.cal == nil {
		return Calibration{Ratio: 1}
	}
	return mc.cal.get()
}

// Frozen returns a counter that uses the model's correction as it is now,
// for the whole of one request: a response of another request that
// updates the calibration between counting and cutting must not make the
// two disagree (a strategy would find the conversation it was asked to
// cut longer than it was counted, and give up). It costs a struct copy.
func (mc *MessageCounter) Frozen() *MessageCounter {
	c := *mc
	cal := mc.Calibration()
	c.fixed = &cal
	return &c
}

// CountText returns the corrected tokens of plain text.
func (mc *MessageCounter) CountText(s string) int {
	return mc.Calibration().scale(mc.text.Count(s), chars(s))
}

// CountMessage returns the corrected tokens m costs in a prompt, structure
// overhead included. The count is cached in m.Tokens: a message already
// counted (Tokens > 0) is not counted again, so whoever changes a
// message's content must zero its Tokens.
func (mc *MessageCounter) CountMessage(m *chat.Message) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	m.Tokens = mc.Calibration().scale(mc.raw(m))
	return m.Tokens
}

// Estimate is the count of a whole prompt.
type Estimate struct {
	// Tokens is the calibrated estimate: compare it with limits and report
	// it (X-Ctxproxy-Tokens).
	Tokens int
	// Raw is the uncalibrated tiktoken count, and Chars the count at 4
	// characters per token (both with structure overhead); pass the
	// Estimate to Registry.Observe with the backend's report so the
	// calibration learns.
	Raw, Chars int
	// Exact reports that Tokens came from the model's own tokenizer
	// (package budget/exact), not from an estimate: it is not to be
	// calibrated from.
	Exact bool
}

// Prompt counts a whole prompt: every message, the tools definitions (the
// request's raw "tools" value; nil if none) and the reply priming. It
// fills each message's Tokens when zero. Messages not seen before are
// tokenized in parallel when there is enough new text to pay for it;
// resent ones cost a hash and a cache look-up each.
func (mc *MessageCounter) Prompt(msgs []chat.Message, tools json.RawMessage) Estimate {
	var e Estimate
	e.Raw, e.Chars = mc.tools(tools)
	if len(msgs) > 0 {
		e.Raw += replyPriming
		e.Chars += replyPriming
	}
	var buf [128]int
	content := mc.contents(msgs, buf[:0])
	cal := mc.Calibration()
	for i := range msgs {
		m := &msgs[i]
		t, c := mc.rawWith(m, content[i])
		if m.Tokens == 0 {
			m.Tokens = cal.scale(t, c)
		}
		e.Raw += t
		e.Chars += c
	}
	e.Tokens = cal.Apply(e)
	return e
}

// Overhead returns the corrected tokens of a prompt that belong to no
// message: the tools definitions, the reply priming and the calibration's
// per-request offset. A strategy cutting messages down to a target should
// be given the target less this, since Prompt's total includes it.
func (mc *MessageCounter) Overhead(tools json.RawMessage) int {
	t, c := mc.tools(tools)
	cal := mc.Calibration()
	return max(0, cal.scale(t+replyPriming, c+replyPriming)+int(math.Round(cal.Offset)))
}

// tools returns the raw tiktoken and characters/4 counts of a request's
// tools definitions. Ollama's chat templates render each definition as
// JSON (llama3.1, qwen2.5 and mistral all do), so the compact JSON of the
// array is counted, plus the section's preamble. Anything that is not a
// JSON array is counted as text; null or empty costs nothing. Counts are
// cached by the raw bytes, since agents resend the same tools with every
// request.
func (mc *MessageCounter) tools(tools json.RawMessage) (tokens, chr int) {
	t := bytes.TrimSpace(tools)
	if len(t) == 0 || string(t) == "null" {
		return 0, 0
	}
	key := maphash.Bytes(mc.toolsSeed, t)
	if n, ok := mc.toolCounts.get(key, len(t)); ok {
		if n == 0 {
			return 0, 0
		}
		return n, toolsOverhead + charsOf(len(t))
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	text := string(t)
	if t[0] == '[' && json.Compact(buf, t) == nil {
		text = buf.String()
	}
	bufPool.Put(buf)
	if text == "[]" {
		mc.toolCounts.put(key, len(t), 0)
		return 0, 0
	}
	n := toolsOverhead + mc.text.Count(text)
	mc.toolCounts.put(key, len(t), n)
	return n, toolsOverhead + charsOf(len(t))
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// raw returns the uncorrected tiktoken and characters/4 counts of one
// message.
func (mc *MessageCounter) raw(m *chat.Message) (tokens, chr int) {
	return mc.rawWith(m, mc.text.Count(m.Content))
}

// rawWith is raw for a message whose content counts content tokens.
func (mc *MessageCounter) rawWith(m *chat.Message, content int) (tokens, chr int) {
	fixed := perMessage + mc.role(m.Role) + len(m.Images)*mc.imageTokens
	tokens = fixed + content
	chr = fixed + chars(m.Content)
	if m.Name != "" {
		tokens += perName + mc.text.Count(m.Name)
		chr += perName + chars(m.Name)
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		tokens += perToolCall + mc.text.Count(tc.Name) + mc.text.Count(tc.Arguments)
		chr += perToolCall + chars(tc.Name) + chars(tc.Arguments)
	}
	return tokens, chr
}

// chars is the 4-characters-per-token count calibration also learns from.
func chars(s string) int { return charsOf(len(s)) }

// charsOf is chars of n bytes: n/4, rounded up.
func charsOf(n int) int { return (n + charsPerToken - 1) / charsPerToken }

const charsPerToken = int(tokenizer.DefaultCharsPerToken)

// role returns the tokens of a role name: one for the usual roles in both
// OpenAI encodings.
func (mc *MessageCounter) role(r string) int {
	switch r {
	case "system", "user", "assistant", "tool", "developer", "function":
		return 1
	}
	return mc.text.Count(r)
}

// parallelMessageBytes is the new text from which messages are counted on
// several cores: a goroutine costs about a microsecond and counting runs
// at 30–40 MB/s a core, so 32 KB (about a millisecond) is worth spreading.
const parallelMessageBytes = 32 << 10

// contents appends to dst the token count of each message's content, in
// one pass: a message counted before costs one hash and one look-up (a
// resent 100-message chat is all look-ups), and those the cache does not
// know are counted, on several cores when there are several and enough
// text.
func (mc *MessageCounter) contents(msgs []chat.Message, dst []int) []int {
	c, ok := mc.text.(*Caching)
	if !ok {
		for i := range msgs {
			dst = append(dst, mc.text.Count(msgs[i].Content))
		}
		return dst
	}
	start := len(dst)
	var pending []int
	var keys []uint64
	size := 0
	for i := range msgs {
		s := msgs[i].Content
		key, n, hit := c.lookup(s)
		dst = append(dst, n)
		if !hit {
			pending = append(pending, i)
			keys = append(keys, key)
			size += len(s)
		}
	}
	if len(pending) >= 2 && size >= parallelMessageBytes && runtime.GOMAXPROCS(0) > 1 {
		counts := make([]int, len(pending))
		parallel.For(len(pending), func(j int) { counts[j] = c.countMiss(keys[j], msgs[pending[j]].Content) })
		for j, i := range pending {
			dst[start+i] = counts[j]
		}
	} else {
		for j, i := range pending {
			dst[start+i] = c.countMiss(keys[j], msgs[i].Content)
		}
	}
	return dst
}

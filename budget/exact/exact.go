// Package exact counts a chat prompt's tokens the way an Ollama server
// renders and tokenizes it, with no calibration: the model's own
// vocabulary and chat template (or built-in renderer), read from
// /api/show with "verbose": true.
//
// Ollama has no tokenize API, but the verbose /api/show answer carries
// everything that decides a prompt's tokens: tokenizer.ggml.model, .pre,
// .tokens, .token_type, .merges or .scores, the BOS/EOS ids and add-BOS
// flag, the chat template, the Modelfile's SYSTEM and MESSAGE lines and
// the model's capabilities. A Model built from it renders a request's
// messages as the server's chatPrompt does (server/prompt.go in Ollama
// v0.17.4) and tokenizes the result with Ollama's own tokenizer package.
//
// Counting is incremental: Ollama's tokenizers cut a prompt at special
// tokens first and encode each piece between them on its own, so a
// Model caches the count of every piece. A resent conversation is
// rendered again (text/template, microseconds) but only its new pieces
// are tokenized. The cached sum equals a whole encode of the prompt; the
// tests check it against the reference on generated vocabularies.
//
// A vision model's images cost what its family's rule says for their
// sizes: before Ollama 0.30 the rule of Ollama's Go engine (its model
// code; visionFamilies), from 0.30 the rule of llama.cpp's multimodal
// library mtmd and its clip encoders, which llama-server runs
// (serverFamilies). A family without a rule is estimated.
package exact

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/ctxproxy/ctxproxy/chat"
	"github.com/ctxproxy/ctxproxy/internal/cache"
	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/model/renderers"
	"github.com/ollama/ollama/template"
	"github.com/ollama/ollama/tokenizer"
)

// ErrUnsupported means the model's tokenizer or template is one exact
// counting does not know; count it some other way.
var ErrUnsupported = errors.New("exact: unsupported tokenizer")

// Show is the part of Ollama's /api/show answer (with "verbose": true)
// that decides a prompt's tokens.
type Show struct {
	Template string `json:"template"`
	System   string `json:"system"`
	// Renderer names the Go renderer that builds the model's prompts in
	// place of the template. Ollama v0.17.4 leaves it empty and names the
	// renderer only in the Modelfile text (a RENDERER line): see
	// RendererOf.
	Renderer  string         `json:"renderer"`
	Modelfile string         `json:"modelfile"`
	Messages  []api.Message  `json:"messages"`
	ModelInfo map[string]any `json:"model_info"`
	// ProjectorInfo is the model_info of a projector kept in a file of
	// its own; empty when the model has none or holds it in its own file.
	ProjectorInfo map[string]any `json:"projector_info"`
	Capabilities  []string       `json:"capabilities"`
	Details       struct {
		Family string `json:"family"`
	} `json:"details"`
	// Name is the model's name as the client asked for it (the server
	// treats deepseek-r1 by name).
	Name string `json:"-"`
	// Version is the server's version ("0.34.3"), whose rules count the
	// prompt (versions.go); "" counts with the newest.
	Version string `json:"-"`
	// Vocab, when set, holds the vocabulary's arrays in place of
	// ModelInfo's (Split): New reads them from here.
	Vocab *Vocab `json:"-"`
}

// maxPieces bounds the caches of piece counts and message shares per
// model; the pieces of live conversations are the recently used ones.
const maxPieces = 1 << 16

// Tokenizer counts prompts for one Ollama model. It is safe for concurrent
// use.
type Tokenizer struct {
	tok      tokenizer.Tokenizer
	tmpl     *template.Template
	renderer string
	// dropThinking: earlier replies lose their <think> part.
	dropThinking bool
	// vision: the model has a projector; images cost it imageCost
	// tokens each.
	vision bool
	// images is how the family's images cost on Ollama's engine, nil
	// when ctxproxy does not know its rule (visionFamilies).
	images imageCoster
	// serverImages is how the family's images cost on llama-server
	// (Ollama 0.30 and later), nil when ctxproxy does not know its rule
	// there (serverFamilies).
	serverImages imageCoster
	// projector is what an image costs on llama.cpp's runner, an
	// estimate (projectorEstimate).
	projector int
	system    string
	preamble  []api.Message
	thinking  bool
	name      string

	// tables are the vocabulary's (its specials and their trie among
	// them), shared with the models that have the same one; holding them
	// keeps them shared.
	tables *tables
	addBOS bool
	addEOS bool
	whole  bool // the tokenizer does not cut at special tokens: encode whole
	// spmPrefix writes a space before text that starts the prompt or
	// follows a special token: llama.cpp's way (see llamacpp.go).
	spmPrefix bool
	// bpe counts and encodes byte-level BPE text as the runner does (tok
	// is nil then).
	bpe *bpe
	// engine is what deciding the runner needs (runOn, OtherEngine).
	engine engine
	// rules are the server version's (versions.go).
	rules serverRules
	// serverRenders: the server renders the prompts (ServerRenders);
	// standIn: ctxproxy lacks its renderer and renders a message's share
	// with ChatML instead.
	serverRenders, standIn bool
	// sketch: no vocabulary; counts are bounds (Sketch).
	sketch bool

	seed maphash.Seed
	// pieces is sharded: a long prompt's new pieces are counted on
	// several cores at once (warm).
	pieces *cache.Sharded[pieceKey, int]
	shares *cache.LRU[uint64, int]
}

type pieceKey struct {
	hash uint64
	n    int
}

// New builds a Model from a verbose /api/show answer. It returns an error
// wrapping ErrUnsupported when the vocabulary is missing (a show answer
// without "verbose") or of a kind Ollama's tokenizers do not have.
func New(show Show) (*Tokenizer, error) {
	kv := show.modelInfo()
	vocab := &tokenizer.Vocabulary{
		Values: strings_(kv[keyTokens]),
		Types:  ints(kv[keyTypes]),
		Scores: floats(kv[keyScores]),
		Merges: strings_(kv[keyMerges]),
		AddBOS: boolOr(kv["tokenizer.ggml.add_bos_token"], true), // the runner's own default: runOn
		AddEOS: boolOr(kv["tokenizer.ggml.add_eos_token"], false),
	}
	if len(vocab.Values) == 0 {
		return nil, fmt.Errorf("%w: no vocabulary in model_info (was /api/show asked with verbose?)", ErrUnsupported)
	}
	if len(vocab.Types) != len(vocab.Values) {
		return nil, fmt.Errorf("%w: %d token types for %d tokens", ErrUnsupported, len(vocab.Types), len(vocab.Values))
	}
	if id, ok := number(kv["tokenizer.ggml.bos_token_id"]); ok {
		vocab.BOS = []int32{int32(id)}
	}
	if id, ok := number(kv["tokenizer.ggml.eos_token_id"]); ok {
		vocab.EOS = append([]int32{int32(id)}, ints(kv["tokenizer.ggml.eos_token_ids"])...)
	}
	for _, ids := range [][]int32{vocab.BOS, vocab.EOS} {
		for _, id := range ids {
			if id < 0 || int(id) >= len(vocab.Values) {
				return nil, fmt.Errorf("%w: special token id %d outside the vocabulary", ErrUnsupported, id)
			}
		}
	}

	m, err := rendering(show)
	if err != nil {
		return nil, err
	}
	rules := m.rules
	m.addBOS = vocab.AddBOS && len(vocab.BOS) > 0
	m.addEOS = vocab.AddEOS && len(vocab.EOS) > 0
	m.pieces = cache.NewSharded[pieceKey, int](maxPieces, func(k pieceKey) uint64 { return k.hash })
	m.shares = cache.New[uint64, int](maxPieces)
	model, _ := kv["tokenizer.ggml.model"].(string)
	pre := rules.tokenizerPre(kv, m.vision && len(show.ProjectorInfo) == 0)
	arch, _ := kv["general.architecture"].(string)
	m.engine = engine{vocab: vocab, kind: model, pre: pre, arch: arch,
		spacePrefix: boolOr(kv["tokenizer.ggml.add_space_prefix"], true), llamaServer: rules.llamaServer}
	if b, ok := kv["tokenizer.ggml.add_bos_token"].(bool); ok {
		m.engine.bosKey = &b
	}
	if len(vocab.BOS) > 0 {
		m.engine.bosText = strings.Clone(vocab.Values[vocab.BOS[0]]) // not a share of a kept file's tokens
	}
	switch model {
	case "gpt2":
		if len(vocab.Merges) == 0 {
			return nil, fmt.Errorf("%w: gpt2 vocabulary without merges", ErrUnsupported)
		}
	case "llama":
		if len(vocab.Scores) != len(vocab.Values) {
			return nil, fmt.Errorf("%w: %d scores for %d tokens", ErrUnsupported, len(vocab.Scores), len(vocab.Values))
		}
	case "bert":
		m.whole = true
		m.addBOS, m.addEOS = false, false
	default:
		return nil, fmt.Errorf("%w: tokenizer.ggml.model %q", ErrUnsupported, model)
	}
	// The tables of a vocabulary another model has are that model's.
	m.tables = tablesOf(model, vocab)
	m.tok = m.tables.tok
	m.engine.vocab, m.engine.bpe = m.tables.vocab, m.tables.bpe
	// llama-server runs every model from Ollama 0.30 on (for byte-level
	// BPE, runOn sets m.tok aside: the runners split differently).
	m.runOn(m.rules.llamaServer || onLlamaCpp(kv, len(show.ProjectorInfo) > 0))

	if m.vision && m.rules.llamaServer {
		// A marker mtmd writes around (or into) an image is text
		// tokenized on its own, its special tokens one each.
		markerTokens := func(text string) int {
			n, _ := m.CountText(text)
			return n
		}
		m.serverImages = serverImagesOf(kv, show.ProjectorInfo, markerTokens)
	}
	return m, nil
}

// Vision reports whether the model has a projector: its runner cuts
// the prompt at each image's tag and puts the image's tokens there, so
// the ids of the rendered text are not the server's where it has images.
func (m *Tokenizer) Vision() bool { return m.vision }

// Name says how the model is counted ("ollama:gpt2/llama-bpe",
// "ollama:spm").
func (m *Tokenizer) Name() string { return m.name }

// Footprint returns the vocabulary m counts with, equal for every model
// that shares it (the same GGUF tokenizer under another name or
// template) and holding none of it, and about how many bytes its tables
// hold.
func (m *Tokenizer) Footprint() (vocab any, bytes int64) {
	return m.tables.key, m.tables.size
}

// Renderer names the built-in renderer that builds m's prompts, "" when
// its chat template does.
func (m *Tokenizer) Renderer() string { return m.renderer }

// Prompt is one chat request as the server sees it.
type Prompt struct {
	Messages []api.Message
	Tools    api.Tools
	// Think is the request's "think" value; nil when it sets none.
	Think *api.ThinkValue
	// Images are the sizes of the messages' images, in the order the
	// messages hold them (the messages' ImageData are not read). An image
	// beyond its end has no known size.
	Images []chat.Image
}

// Render returns the prompt text the server builds for p: the
// Modelfile's MESSAGE lines and SYSTEM prompt added as the server adds
// them, then the chat template (or the model's renderer) applied.
func (m *Tokenizer) Render(p Prompt) (string, error) {
	msgs := p.Messages
	if len(msgs) > 0 {
		full := make([]api.Message, 0, len(m.preamble)+len(msgs)+1)
		if msgs[0].Role != "system" && m.system != "" {
			full = append(full, api.Message{Role: "system", Content: m.system})
		}
		full = append(full, m.preamble...)
		full = append(full, msgs...)
		msgs = full
		if m.dropThinking {
			msgs = withoutThinking(msgs)
		}
	}
	// Images: without a renderer the server writes an [img-N] tag into the
	// content (server/prompt.go).
	id := 0
	if m.renderer == "" && slices.ContainsFunc(msgs, func(x api.Message) bool { return len(x.Images) > 0 }) {
		msgs = slices.Clone(msgs) // never write into the caller's messages
	}
	for i := range msgs {
		if len(msgs[i].Images) == 0 || m.renderer != "" {
			continue
		}
		var prefix string
		content := msgs[i].Content
		for range msgs[i].Images {
			tag := fmt.Sprintf("[img-%d]", id)
			id++
			if !strings.Contains(content, "[img]") {
				prefix += tag
			} else {
				content = strings.Replace(content, "[img]", tag, 1)
			}
		}
		msgs[i].Content = prefix + content
	}
	think := p.Think
	if think == nil && m.thinking {
		think = &api.ThinkValue{Value: true} // the server's default for thinking models
	}
	if m.renderer != "" && !m.standIn {
		return renderers.RenderWithRenderer(m.renderer, msgs, p.Tools, think)
	}
	var b bytes.Buffer
	v := template.Values{Messages: msgs, Tools: p.Tools, IsThinkSet: think != nil}
	if think != nil {
		v.Think, v.ThinkLevel = think.Bool(), think.String()
	}
	if err := m.tmpl.Execute(&b, v); err != nil {
		return "", fmt.Errorf("exact: render the chat template: %w", err)
	}
	return b.String(), nil
}

// Count returns the tokens the server evaluates for p: the rendered
// prompt's tokens, BOS/EOS as the vocabulary adds them, and for a vision
// model each image's cost (imageCost) where its tag was: the runner
// encodes the text between tags on its own, BOS with the first part only.
// exact is false when an image's cost is an estimate (see imageCost). A
// model without vision gets only an image's tag in the text, which is
// counted exactly.
func (m *Tokenizer) Count(p Prompt) (tokens int, exact bool, err error) {
	tokens, exact, err = m.countLocal(p)
	return tokens, exact && !m.serverRenders && !m.sketch, err
}

// ServerRenders reports whether the server must render this model's
// prompts for an exact count: a model with a renderer, on Ollama 0.30 and
// later, whose renderers change from one version to the next and which
// has renderers ctxproxy lacks. Count then renders with ctxproxy's own
// (or ChatML) and says the count is not exact; CountPrompt counts what
// the server rendered.
func (m *Tokenizer) ServerRenders() bool { return m.serverRenders }

// countLocal is Count, rendered by ctxproxy.
func (m *Tokenizer) countLocal(p Prompt) (tokens int, exact bool, err error) {
	text, err := m.Render(p)
	if err != nil {
		return 0, false, err
	}
	return m.CountRendered(text, p.Sizes())
}

// Sizes returns one size per image the messages hold, in order: Images,
// cut or filled with unknown sizes to that number.
func (p Prompt) Sizes() []chat.Image {
	n := 0
	for _, msg := range p.Messages {
		n += len(msg.Images)
	}
	if n <= len(p.Images) {
		return p.Images[:n]
	}
	return append(slices.Clone(p.Images), make([]chat.Image, n-len(p.Images))...)
}

// CountRendered returns the tokens the server evaluates for a prompt it
// rendered (text, its images written as [img-N] tags) holding images, in
// order: for a vision model the runner encodes the text between tags on
// its own, BOS with the first part only, and puts each image's cost
// (imageCost) where its tag was. exact is false when an image's cost is
// an estimate. A model without vision, or a prompt without images, is
// counted as CountPrompt counts it.
func (m *Tokenizer) CountRendered(text string, images []chat.Image) (tokens int, exact bool, err error) {
	if !m.vision || len(images) == 0 {
		n, err := m.CountPrompt(text)
		return n, err == nil, err
	}
	parts := imgTag.Split(text, -1)
	n, err := m.CountPrompt(parts[0])
	if err != nil {
		return 0, false, err
	}
	exact = true
	for i, part := range parts[1:] {
		k, err := m.CountText(part)
		if err != nil {
			return 0, false, err
		}
		var img chat.Image
		if i < len(images) {
			img = images[i]
		}
		cost, ok := m.imageCost(img)
		n += k + cost
		exact = exact && ok
	}
	return n, exact, nil
}

// CountPrompt returns the tokens of a rendered prompt, BOS and EOS added
// as the vocabulary says (the runner encodes a prompt with its specials).
func (m *Tokenizer) CountPrompt(text string) (int, error) {
	n, err := m.CountText(m.rules.sent(text, m.renderer, m.engine))
	if err != nil {
		return 0, err
	}
	if m.addBOS {
		n++
	}
	if m.addEOS {
		n++
	}
	return n, nil
}

// CountText returns the tokens of text with no BOS or EOS added: special
// tokens written in it count as one token each, as the server parses them.
func (m *Tokenizer) CountText(text string) (int, error) {
	if text == "" || m.sketch {
		return len(text), nil
	}
	if m.whole {
		ids, err := m.tok.Encode(text, false)
		return len(ids), err
	}
	pieces := m.split(text)
	if len(text) >= parallelBytes && len(pieces) > 2 {
		m.warm(pieces)
	}
	total := 0
	for _, piece := range pieces {
		if piece.special {
			total++
			continue
		}
		n, err := m.countPiece(piece.text)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Tokenize returns the token ids of text; addSpecial adds BOS/EOS as the
// vocabulary says. The ids are Ollama's Go tokenizer's: for a model on
// llama.cpp's runner that tokenizes differently (see TokenizesAsServer)
// they are close, and only the counts are the server's.
func (m *Tokenizer) Tokenize(text string, addSpecial bool) ([]int32, error) {
	if m.bpe == nil {
		return m.tok.Encode(text, addSpecial)
	}
	var ids []int32
	if addSpecial && m.addBOS {
		ids = append(ids, m.engine.vocab.BOS[0])
	}
	for _, p := range m.split(text) {
		if p.special {
			ids = append(ids, m.engine.bpe.id(p.text))
			continue
		}
		ids = m.bpe.encode(p.text, ids)
	}
	if addSpecial && m.addEOS {
		ids = append(ids, m.engine.vocab.EOS[0])
	}
	return ids, nil
}

// TokenizesAsServer reports whether Tokenize gives the very ids the
// server does, not only the same count.
func (m *Tokenizer) TokenizesAsServer() bool { return !m.spmPrefix }

// Detokenize returns the text of ids. Unknown ids are an error.
func (m *Tokenizer) Detokenize(ids []int32) (string, error) {
	size := int32(len(m.engine.vocab.Types))
	for _, id := range ids {
		if id < 0 || id >= size {
			return "", fmt.Errorf("exact: token id %d outside the vocabulary of %d", id, size)
		}
	}
	if m.bpe != nil {
		return m.engine.bpe.decode(ids), nil
	}
	return m.tok.Decode(ids)
}

// Share returns the tokens msg adds to a prompt: its content and the
// template's text around it. It is the difference the message makes when
// it follows one message of another role, so the template's per-message
// overhead is in it and the prompt's fixed parts (BOS, the reply priming,
// the model's SYSTEM) are not. Shares are cached per message.
//
// For templates that render each message on its own (ChatML, Llama 3,
// Mistral and most others) Count less the shares of a conversation is the
// same for every conversation (BOS, the reply priming, the model's
// SYSTEM, the tools); where a template joins or reorders
// messages they are close, and Count stays the measure of a whole prompt.
func (m *Tokenizer) Share(msg api.Message, images []chat.Image) (int, error) {
	key := m.messageKey(&msg, images)
	if n, ok := m.shares.Get(key); ok {
		return n, nil
	}
	anchor := api.Message{Role: "user"}
	if msg.Role == "user" {
		anchor.Role = "assistant"
	}
	with, err := m.count(Prompt{Messages: []api.Message{anchor, msg}})
	if err != nil {
		return 0, err
	}
	without, err := m.count(Prompt{Messages: []api.Message{anchor}})
	if err != nil {
		return 0, err
	}
	n := max(0, with-without)
	if m.vision {
		for i := range msg.Images {
			var img chat.Image
			if i < len(images) {
				img = images[i]
			}
			cost, _ := m.imageCost(img)
			n += cost
		}
	}
	m.shares.Add(key, n)
	return n, nil
}

// count is Count without the images' flat cost.
func (m *Tokenizer) count(p Prompt) (int, error) {
	text, err := m.Render(p)
	if err != nil {
		return 0, err
	}
	return m.CountPrompt(text)
}

// messageKey hashes what of a message can change its rendering.
func (m *Tokenizer) messageKey(msg *api.Message, images []chat.Image) uint64 {
	var h maphash.Hash
	h.SetSeed(m.seed)
	for _, s := range []string{msg.Role, msg.Content, msg.Thinking, msg.ToolName, msg.ToolCallID} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	for _, tc := range msg.ToolCalls {
		h.WriteString(tc.ID)
		h.WriteByte(0)
		h.WriteString(tc.Function.Name)
		h.WriteByte(0)
		args, _ := json.Marshal(tc.Function.Arguments)
		h.Write(args)
		h.WriteByte(0)
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(msg.Images)))
	h.Write(n[:])
	for _, img := range images {
		binary.LittleEndian.PutUint32(n[:4], uint32(img.Width))
		binary.LittleEndian.PutUint32(n[4:], uint32(img.Height))
		h.Write(n[:])
	}
	return h.Sum64()
}

// Pretokenizer returns the pre-tokenizer expressions Ollama's model
// packages use for a byte-level BPE vocabulary's tokenizer.ggml.pre
// (model/models/llama/model.go in v0.17.4): none for "default" (the
// tokenizer's GPT-2 expression), Qwen 2's, Refact's, Tekken's, and the
// Llama 3 expression for every other value, as llama.cpp's own table maps
// "llama-bpe", "llama3", "smaug-bpe" and their kin.
func Pretokenizer(pre string) []string {
	switch pre {
	case "", "default":
		return nil
	case "qwen2", "deepseek-r1-qwen":
		return []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	case "refact":
		return []string{`\p{N}`, `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`}
	case "tekken":
		return []string{`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	default:
		return []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`}
	}
}

// The model_info values are JSON-decoded: arrays of any, numbers float64.
